package agentd

import (
	"context"
	"database/sql"
	"errors"

	"github.com/deepcode-dev/deepcode/shared/api"
	"github.com/deepcode-dev/deepcode/shared/errs"
	"github.com/deepcode-dev/deepcode/shared/rpc"
)

// blobMethods registers the item blob reads (the deepcode provider's whole
// command output, a changed file before and after).
func (a *Agentd) blobMethods(mux *rpc.Mux) {
	mux.Handle(api.MethodTurnItemBlob, rpc.Method(a.itemBlob))
}

func (a *Agentd) itemBlob(ctx context.Context, p api.TurnItemBlobParams) (api.TurnItemBlobResult, error) {
	var res api.TurnItemBlobResult
	if !validID("thr_", p.ThreadID) || !validID("turn_", p.TurnID) || !validID("item_", p.ItemID) {
		return res, errs.New(errs.NotFound, "no item %q in turn %q of thread %q", p.ItemID, p.TurnID, p.ThreadID)
	}
	switch p.Name {
	case "output", "before", "after":
	default:
		return res, errs.New(errs.InvalidParams, "name %q is not a blob: use output, before or after", p.Name)
	}
	if p.Offset < 0 {
		return res, errs.New(errs.InvalidParams, "offset must not be negative")
	}
	if p.MaxBytes < 0 || p.MaxBytes > api.MaxBlobRead {
		return res, errs.New(errs.InvalidParams, "maxBytes must be from 1 to %d (0: %d)", api.MaxBlobRead, api.MaxBlobRead)
	}
	n := p.MaxBytes
	if n == 0 {
		n = api.MaxBlobRead
	}
	var size int64
	var data []byte
	err := a.e.q.QueryRowContext(ctx, `SELECT length(b.data), substr(b.data, ?, ?) FROM item_blobs b JOIN items i ON i.id = b.item_id
		WHERE b.item_id = ? AND b.name = ? AND i.turn_id = ? AND i.thread_id = ?`, p.Offset+1, n, p.ItemID, p.Name, p.TurnID, p.ThreadID).Scan(&size, &data)
	if errors.Is(err, sql.ErrNoRows) {
		return res, errs.New(errs.NotFound, "item %s of turn %s has no %s blob", p.ItemID, p.TurnID, p.Name)
	}
	if err != nil {
		return res, dbErr(err)
	}
	if p.Offset > size {
		return res, errs.New(errs.InvalidParams, "offset %d is past the blob's end (%d bytes)", p.Offset, size)
	}
	if data == nil {
		data = []byte{}
	}
	next := p.Offset + int64(len(data))
	return api.TurnItemBlobResult{Name: p.Name, Size: size, Offset: p.Offset, Data: data, NextOffset: next, EOF: next >= size}, nil
}
