package launch

import (
	"bufio"
	"io"
	"strings"
	"sync"
)

// lineWriter serialises whole lines from many workers onto one writer, so
// that lines never interleave mid-way.
type lineWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lineWriter) writeLine(s string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	io.WriteString(l.w, s)
}

// tail keeps the last n lines a worker wrote (stdout and stderr together).
type tail struct {
	mu    sync.Mutex
	n     int
	lines []string
}

func (t *tail) add(s string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.lines = append(t.lines, s)
	if len(t.lines) > t.n {
		t.lines = t.lines[len(t.lines)-t.n:]
	}
}

func (t *tail) get() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]string(nil), t.lines...)
}

// copyLines reads r line by line (any length), writing each with prefix to
// out, keeping it in t and passing it to watch (when set), until r ends.
func copyLines(r io.Reader, prefix string, out *lineWriter, t *tail, watch func(string)) {
	br := bufio.NewReaderSize(r, 64<<10)
	for {
		line, err := br.ReadString('\n')
		if line != "" {
			line = strings.TrimRight(line, "\r\n")
			t.add(line)
			if watch != nil {
				watch(line)
			}
			out.writeLine(prefix + line + "\n")
		}
		if err != nil {
			return
		}
	}
}
