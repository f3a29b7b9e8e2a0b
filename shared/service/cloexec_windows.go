package service

func setCloseOnExec(int) {}

func setNonblock(int) {}
