// Command mangen writes the manual pages of deepcode, one per command of its
// cobra command tree (deepcode.1, deepcode-service.1,
// deepcode-service-start.1, …), into a folder. packaging/build.sh runs it
// (go run ./packaging/mangen) and compresses the pages into the packages.
//
//	go run ./packaging/mangen -dir DIR [-version V] [-date YYYY-MM-DD]
//
// The date in the pages' footers is -date, else $SOURCE_DATE_EPOCH, else
// today: a build that sets one of them writes the same pages every time.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/deepcode-dev/deepcode/cmd/deepcode/cli"
	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"
)

func main() {
	if err := run(os.Args[1:], os.Stderr); err != nil {
		fmt.Fprintf(os.Stderr, "mangen: %v\n", err)
		os.Exit(2)
	}
}

func run(args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("mangen", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := fs.String("dir", "", "folder to write the pages into (created if missing)")
	version := fs.String("version", "", "deepcode version named in the pages' footers")
	date := fs.String("date", "", "date in the pages' footers, YYYY-MM-DD (default $SOURCE_DATE_EPOCH, else today)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *dir == "" || fs.NArg() > 0 {
		return errors.New("usage: mangen -dir DIR [-version V] [-date YYYY-MM-DD]")
	}
	header := &doc.GenManHeader{Section: "1", Manual: "deepcode manual", Source: strings.TrimSpace("deepcode " + *version)}
	if *date != "" {
		d, err := time.Parse(time.DateOnly, *date)
		if err != nil {
			return fmt.Errorf("-date %q: want YYYY-MM-DD", *date)
		}
		header.Date = &d
	}
	if err := os.MkdirAll(*dir, 0o755); err != nil {
		return err
	}
	return generate(cli.CommandTree(), header, *dir)
}

// generate writes a page for root and every command below it that is not
// hidden, without cobra's "Auto generated" footer line.
func generate(root *cobra.Command, header *doc.GenManHeader, dir string) error {
	var quiet func(*cobra.Command)
	quiet = func(c *cobra.Command) {
		c.DisableAutoGenTag = true
		for _, sub := range c.Commands() {
			quiet(sub)
		}
	}
	quiet(root)
	return doc.GenManTree(root, header, dir)
}
