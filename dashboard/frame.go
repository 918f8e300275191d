package dashboard

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"trellis/viz"
)

// noVersion: a browser that has nothing yet (it gets every panel).
const noVersion = ^uint64(0)

// frame is one rendering of the history. It is immutable once made but
// for its cache of encodings: a browser that holds version s is sent only
// the panels that changed after s, and that diff is encoded once for all
// the browsers holding s.
type frame struct {
	epoch   int64
	version uint64
	status  string
	done    bool
	panels  []panelState // page order

	mu   sync.Mutex
	encs map[uint64][]byte // since -> the event's data
}

// panelState is a panel's latest rendering, the version at which it last
// changed and its HTML and note as JSON strings (encoded once per change).
type panelState struct {
	viz.Panel
	changed          uint64
	encHTML, encNote []byte
}

// newFrame renders version v; panels equal to prev's keep prev's change
// version and encodings.
func newFrame(epoch int64, v uint64, status string, done bool, page []viz.Panel, prev *frame) *frame {
	old := map[string]panelState{}
	if prev != nil {
		for _, p := range prev.panels {
			old[p.ID] = p
		}
	}
	f := &frame{epoch: epoch, version: v, status: status, done: done, encs: map[uint64][]byte{}}
	for _, p := range page {
		o, ok := old[p.ID]
		if ok && o.HTML == p.HTML && o.Note == p.Note {
			f.panels = append(f.panels, o)
			continue
		}
		f.panels = append(f.panels, panelState{Panel: p, changed: v, encHTML: jsonString(string(p.HTML)), encNote: jsonString(p.Note)})
	}
	return f
}

// id is the frame's event id: "epoch-version".
func (f *frame) id() string { return fmt.Sprintf("%d-%d", f.epoch, f.version) }

// since reads an event id sent back by a browser (its last frame): the
// version it holds, or noVersion when the id is empty, malformed, from
// another hub or ahead of this frame.
func (f *frame) since(id string) uint64 {
	e, v, ok := strings.Cut(id, "-")
	if !ok || e != strconv.FormatInt(f.epoch, 10) {
		return noVersion
	}
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil || n > f.version {
		return noVersion
	}
	return n
}

// diff is the "frame" event's data for a browser holding version since:
// {"v", "status", "done", "panels": id -> HTML, "notes": id -> note}, with
// only the panels that changed after since (all of them for noVersion).
func (f *frame) diff(since uint64) []byte {
	f.mu.Lock()
	defer f.mu.Unlock()
	if b, ok := f.encs[since]; ok {
		return b
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, `{"v":%d,"status":%s,"done":%t,"panels":{`, f.version, jsonString(f.status), f.done)
	f.each(&b, since, func(p panelState) []byte { return p.encHTML })
	b.WriteString(`},"notes":{`)
	f.each(&b, since, func(p panelState) []byte { return p.encNote })
	b.WriteString(`}}`)
	f.encs[since] = b.Bytes()
	return b.Bytes()
}

func (f *frame) each(b *bytes.Buffer, since uint64, val func(panelState) []byte) {
	n := 0
	for _, p := range f.panels {
		if since != noVersion && p.changed <= since {
			continue
		}
		if n > 0 {
			b.WriteByte(',')
		}
		b.Write(jsonString(p.ID))
		b.WriteByte(':')
		b.Write(val(p))
		n++
	}
}

// page is the frame's panels, for a whole page.
func (f *frame) page() []viz.Panel {
	ps := make([]viz.Panel, len(f.panels))
	for i, p := range f.panels {
		ps[i] = p.Panel
	}
	return ps
}

// jsonString encodes s as a JSON string, leaving <, > and & as they are
// (an event's data is not HTML).
func jsonString(s string) []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.Encode(s)
	return bytes.TrimRight(b.Bytes(), "\n")
}
