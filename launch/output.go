package launch

import (
	"bufio"
	"fmt"
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
	if len(s) > tailLineBytes {
		s = s[:tailLineBytes] + fmt.Sprintf(" [... %d more bytes]", len(s)-tailLineBytes)
	}
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

// copyLines reads r line by line, writing each with prefix to out,
// keeping it in t and passing it to watch (when set), until r ends. A line
// longer than maxLine bytes is cut there, with a note of how many bytes
// were dropped: a worker's output costs the launcher at most maxLine bytes
// a line.
func copyLines(r io.Reader, prefix string, out *lineWriter, t *tail, watch func(string), maxLine int) {
	br := bufio.NewReaderSize(r, 64<<10)
	for {
		line, cut, err := readLine(br, maxLine)
		if len(line) > 0 || cut > 0 || err == nil {
			s := strings.TrimRight(string(line), "\r")
			if cut > 0 {
				s += fmt.Sprintf(" [... %d more bytes cut: a line of output is limited to %d bytes]", cut, maxLine)
			}
			if s != "" || err == nil {
				t.add(s)
				if watch != nil {
					watch(s)
				}
				out.writeLine(prefix + s + "\n")
			}
		}
		if err != nil {
			return
		}
	}
}

// readLine reads one line without its newline, keeping at most maxLine
// bytes of it; cut counts the bytes dropped. err is nil when the line
// ended with a newline.
func readLine(br *bufio.Reader, maxLine int) (line []byte, cut int64, err error) {
	for {
		frag, err := br.ReadSlice('\n')
		if err == nil {
			frag = frag[:len(frag)-1]
		}
		keep := min(len(frag), max(maxLine-len(line), 0))
		line = append(line, frag[:keep]...)
		cut += int64(len(frag) - keep)
		if err != bufio.ErrBufferFull {
			return line, cut, err
		}
	}
}
