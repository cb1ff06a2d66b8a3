// Command goref is the benchmark's reference pipeline written in Go: about the least a
// compiled program has to do to turn watch lines into the CloudEvents the bridge publishes.
// It is the ceiling the bridge's rate is compared with (docs/performance.md); bench/run.py
// runs it right after each bridge run, on the same changes.
//
//	goref --api URL --nats URL --rv RV --count N [--window W] [--timeout S]
//	      [--cluster NAME] [--prefix PREFIX] [--cpuprofile FILE]
//	goref --version
//
// The command line and the output are those of bench/reference.py. Per watch line:
//
//   - a raw HTTP GET of /api/v1/events?watch=true&resourceVersion=RV (net/http undoes the
//     chunked encoding), lines split in a 1 MiB buffer without copying;
//   - the line checked to be UTF-8 (unicode/utf8, ASCII eight bytes at a time) and parsed
//     whole by github.com/valyala/fastjson (a reused Parser: its grammar checked, no
//     allocation per line), as the bridge's msgspec decode checks it; the fields the bridge
//     reads taken from the parse: metadata uid, resourceVersion, namespace, creationTimestamp,
//     involvedObject kind and name, reason, type, count, series count and lastObservedTime,
//     lastTimestamp, eventTime;
//   - the object's bytes taken as a slice of the line (the API server's
//     `{"type":..,"object":..}`, as the bridge's fast path; any other shape re-encoded);
//   - BOOKMARK: skipped; DELETED: skipped (the bridge's default); ERROR: exit 1; a version not
//     newer than the last one, or without uid or resourceVersion: skipped ("skipped");
//   - the CloudEvent in structured mode, built as the bridge's converter builds it (same
//     attributes in the same order: specversion, id = <uid>/<resourceVersion>, source, type,
//     subject, time when one is RFC 3339, datacontenttype, k8scluster, k8snamespace, k8skind,
//     k8sname, k8sreason, k8scount; strings escaped as the bridge's encoder escapes them),
//     data = the Event's bytes with metadata.managedFields cut out (the key found in the
//     bytes, its value's end by a bracket scan; kept whole in the rare shapes the bridge
//     re-encodes);
//   - github.com/nats-io/nats.go's jetstream PublishMsgAsync to
//     <prefix>.<cluster>.<namespace>.<kind>.<reason> (tokens sanitised as the bridge does;
//     the default prefix goref.events is two bytes longer than the bridge's), headers
//     Nats-Msg-Id = the id and Content-Type: application/cloudevents+json, at most W acks
//     outstanding (WithPublishAsyncMaxPending); acks counted by the ack and error handlers.
//
// Nothing else: no filter, no checkpoint, no metrics, no retries, no reconnects.
// It stops after N acks and prints one JSON line: when the first and the N-th ack came
// (CLOCK_MONOTONIC, Python's time.monotonic() on Linux), its CPU seconds (getrusage, all
// threads, from just before the watch request to the N-th ack) and peak RSS (VmHWM).
package main

import (
	"bufio"
	"crypto/sha256"
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"strconv"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/valyala/fastjson"
	"golang.org/x/sys/unix"
)

const (
	msgIDHeader       = "Nats-Msg-Id"
	structuredContent = "application/cloudevents+json"
	managedFieldsKey  = `"managedFields":`
)

// monotonic is CLOCK_MONOTONIC in seconds: the clock of the parent's time.monotonic().
func monotonic() float64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		fail("clock_gettime: %v", err)
	}
	return float64(ts.Sec) + float64(ts.Nsec)/1e9
}

// cpuSeconds is this process's CPU time, user + system, every thread (getrusage).
func cpuSeconds() float64 {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		fail("getrusage: %v", err)
	}
	return float64(ru.Utime.Sec+ru.Stime.Sec) + float64(ru.Utime.Usec+ru.Stime.Usec)/1e6
}

// peakRSS is this process's peak RSS in kB: VmHWM of /proc/self/status. (Not getrusage's
// ru_maxrss: Linux carries it over execve, so a child of a large process would report its
// parent's.)
func peakRSS() int64 {
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range bytes.Split(status, []byte("\n")) {
		if rest, ok := bytes.CutPrefix(line, []byte("VmHWM:")); ok {
			kb, _ := strconv.ParseInt(string(bytes.TrimSpace(bytes.TrimSuffix(
				bytes.TrimSpace(rest), []byte("kB")))), 10, 64)
			return kb
		}
	}
	return 0
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "goref: "+format+"\n", args...)
	os.Exit(1)
}

type converter struct {
	parser  fastjson.Parser
	prefix  []byte // "<prefix>.<cluster token>."
	source  []byte // "k8s://<cluster>/namespaces/"
	cluster []byte // the cluster's name, JSON-escaped
	lastRV  int64
	subject []byte // scratch
	ceTypes map[string]string
	skipped int // not a watch event, not an Event, not newer
	ignored int // BOOKMARK, DELETED
}

func newConverter(prefix, cluster string) *converter {
	return &converter{
		prefix:  []byte(prefix + "." + string(token(nil, []byte(cluster))) + "."),
		source:  []byte("k8s://" + cluster + "/namespaces/"),
		cluster: appendString(nil, []byte(cluster)),
		ceTypes: map[string]string{},
	}
}

// appendString appends s (unescaped) as the content of a JSON string, escaped as msgspec
// (the bridge's encoder) escapes: '"', '\' and control characters, nothing else.
func appendString(dst, s []byte) []byte {
	const hex = "0123456789abcdef"
	start := 0
	for i, b := range s {
		if b >= 0x20 && b != '"' && b != '\\' {
			continue
		}
		dst = append(dst, s[start:i]...)
		switch b {
		case '"', '\\':
			dst = append(dst, '\\', b)
		case '\b':
			dst = append(dst, '\\', 'b')
		case '\t':
			dst = append(dst, '\\', 't')
		case '\n':
			dst = append(dst, '\\', 'n')
		case '\f':
			dst = append(dst, '\\', 'f')
		case '\r':
			dst = append(dst, '\\', 'r')
		default:
			dst = append(dst, '\\', 'u', '0', '0', hex[b>>4], hex[b&0xf])
		}
		start = i + 1
	}
	return append(dst, s[start:]...)
}

// token is a subject token as k8s_event_common.subjects.token makes it: a value of
// A-Za-z0-9_- starting with a letter or digit as it is (up to 128 bytes), an empty one "_",
// any other "_" and the value with A-Za-z0-9- kept, "." as "__" and every other byte "_" and
// two lowercase hex digits; a token over 128 bytes is cut at a whole escape, then "_-" and 16
// hex digits of the value's SHA-256.
func token(dst, s []byte) []byte {
	if len(s) == 0 {
		return append(dst, '_')
	}
	plain := len(s) <= maxToken && alnum(s[0])
	for _, b := range s {
		if !plain {
			break
		}
		plain = alnum(b) || b == '_' || b == '-'
	}
	if plain {
		return append(dst, s...)
	}
	start := len(dst)
	dst = append(dst, '_')
	for _, b := range s {
		switch {
		case alnum(b) || b == '-':
			dst = append(dst, b)
		case b == '.':
			dst = append(dst, '_', '_')
		default:
			dst = append(dst, '_', lowerHex[b>>4], lowerHex[b&0xf])
		}
	}
	if len(dst)-start <= maxToken {
		return dst
	}
	sum := sha256.Sum256(s)
	limit := maxToken - 2 - 16
	i, end := 1, 1
	esc := dst[start:]
	for i < len(esc) {
		switch {
		case esc[i] != '_':
			i++
		case esc[i+1] == '_':
			i += 2
		default:
			i += 3
		}
		if i > limit {
			break
		}
		end = i
	}
	dst = append(dst[:start+end], '_', '-')
	for _, b := range sum[:8] {
		dst = append(dst, lowerHex[b>>4], lowerHex[b&0xf])
	}
	return dst
}

const maxToken = 128

const lowerHex = "0123456789abcdef"

func alnum(b byte) bool {
	return b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' || b >= '0' && b <= '9'
}

// ceType is io.k8s.event.<the Event's type lowercased, [a-z0-9] only> (cached: few values).
func (c *converter) ceType(v *fastjson.Value) string {
	if v == nil || v.Type() != fastjson.TypeString {
		return "io.k8s.event.unknown"
	}
	raw, _ := v.StringBytes()
	if t, ok := c.ceTypes[string(raw)]; ok {
		return t
	}
	var out []byte
	for _, r := range string(raw) {
		if r >= 'A' && r <= 'Z' {
			r += 'a' - 'A'
		}
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			out = append(out, byte(r))
		}
	}
	if len(out) == 0 {
		out = []byte("unknown")
	}
	t := "io.k8s.event." + string(out)
	if len(c.ceTypes) < 4096 {
		c.ceTypes[string(raw)] = t
	}
	return t
}

func digits(b []byte) bool {
	for _, c := range b {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// rfc3339 is bridge.core.converting's pattern:
// ^\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2}(\.\d{1,9})?([Zz]|[+-]\d{2}:\d{2})$
func rfc3339(t []byte) bool {
	if len(t) < 20 || !digits(t[0:4]) || t[4] != '-' || !digits(t[5:7]) || t[7] != '-' ||
		!digits(t[8:10]) || (t[10] != 'T' && t[10] != 't') || !digits(t[11:13]) ||
		t[13] != ':' || !digits(t[14:16]) || t[16] != ':' || !digits(t[17:19]) {
		return false
	}
	rest := t[19:]
	if rest[0] == '.' {
		n := 1
		for n < len(rest) && rest[n] >= '0' && rest[n] <= '9' {
			n++
		}
		if n == 1 || n > 10 {
			return false
		}
		rest = rest[n:]
	}
	switch {
	case len(rest) == 1:
		return rest[0] == 'Z' || rest[0] == 'z'
	case len(rest) == 6:
		return (rest[0] == '+' || rest[0] == '-') && digits(rest[1:3]) && rest[3] == ':' &&
			digits(rest[4:6])
	}
	return false
}

// positiveInt is a JSON integer > 0 (the bridge's isinstance(c, int) and c > 0).
func positiveInt(v *fastjson.Value) (int64, bool) {
	if v == nil || v.Type() != fastjson.TypeNumber {
		return 0, false
	}
	n, err := v.Int64()
	return n, err == nil && n > 0
}

// str is a string field, unescaped; nil when it is missing or not a string.
func str(v *fastjson.Value, keys ...string) []byte {
	f := v.Get(keys...)
	if f == nil || f.Type() != fastjson.TypeString {
		return nil
	}
	b, _ := f.StringBytes()
	return b
}

// printable: Kubernetes only ever writes UUIDs and digits; the id goes into a header line.
func printable(b []byte) bool {
	for _, c := range b {
		if c < 0x20 || c == 0x7f {
			return false
		}
	}
	return true
}

// valueEnd is where the JSON value at the start of b ends (the bytes were validated by the
// parse before): past the closing bracket of an array or object, past the closing quote of a
// string, at the delimiter after anything else; -1 when there is none.
func valueEnd(b []byte) int {
	if len(b) == 0 {
		return -1
	}
	if b[0] != '[' && b[0] != '{' && b[0] != '"' {
		if i := bytes.IndexAny(b, ",}] \t\r\n"); i > 0 {
			return i
		}
		return -1
	}
	depth, inString := 0, false
	for i := 0; i < len(b); i++ {
		c := b[i]
		if inString {
			if c == '\\' {
				i++
			} else if c == '"' {
				inString = false
				if depth == 0 {
					return i + 1
				}
			}
			continue
		}
		switch c {
		case '"':
			inString = true
		case '[', '{':
			depth++
		case ']', '}':
			depth--
			if depth == 0 {
				return i + 1
			}
		}
	}
	return -1
}

// withoutManagedFields is obj with metadata.managedFields cut out of its bytes as the bridge
// cuts it (key, value and one comma) when `"managedFields":` occurs exactly once, right before
// its value; whole otherwise (the bridge re-encodes such an Event).
func withoutManagedFields(obj []byte) ([]byte, []byte) {
	key := []byte(managedFieldsKey)
	k := bytes.Index(obj, key)
	if k < 1 || bytes.Contains(obj[k+len(key):], key) {
		return obj, nil
	}
	n := valueEnd(obj[k+len(key):])
	if n < 0 {
		return obj, nil
	}
	end := k + len(key) + n
	switch {
	case end >= len(obj):
	case obj[end] == ',':
		return obj[:k], obj[end+1:]
	case obj[end] == '}' && obj[k-1] == ',':
		return obj[:k-1], obj[end:]
	case obj[end] == '}' && obj[k-1] == '{':
		return obj[:k], obj[end:]
	}
	return obj, nil
}

type outcome int

const (
	publish outcome = iota
	skip
)

var (
	linePrefix = []byte(`{"type":"`)
	objectKey  = []byte(`","object":`)
)

// objectBytes is the object's bytes as a slice of the line when the line has the API
// server's shape, {"type":"<typ>","object":{...}}; nil otherwise.
func objectBytes(line, typ []byte) []byte {
	head := len(linePrefix) + len(typ) + len(objectKey)
	if len(line) < head+2 || !bytes.HasPrefix(line, linePrefix) ||
		!bytes.Equal(line[len(linePrefix):len(linePrefix)+len(typ)], typ) ||
		!bytes.Equal(line[len(linePrefix)+len(typ):head], objectKey) ||
		line[head] != '{' || line[len(line)-1] != '}' {
		return nil
	}
	return line[head : len(line)-1]
}

// convert turns one watch line into the message to publish (or says to skip it).
func (c *converter) convert(line []byte) (*nats.Msg, outcome, error) {
	if !utf8.Valid(line) {
		c.skipped++
		return nil, skip, nil
	}
	doc, err := c.parser.ParseBytes(line) // the whole line, its grammar checked
	if err != nil {
		c.skipped++
		return nil, skip, nil
	}
	typ := str(doc, "type")
	ev := doc.Get("object")
	if typ == nil || ev == nil || ev.Type() != fastjson.TypeObject {
		c.skipped++
		return nil, skip, nil
	}
	switch string(typ) {
	case "ADDED", "MODIFIED":
	case "BOOKMARK", "DELETED":
		c.ignored++
		return nil, skip, nil
	case "ERROR":
		return nil, skip, fmt.Errorf("the watch ended with an ERROR: %s", ev)
	default:
		c.skipped++
		return nil, skip, nil
	}
	meta, involved, series := ev.Get("metadata"), ev.Get("involvedObject"), ev.Get("series")
	uid, rv := str(meta, "uid"), str(meta, "resourceVersion")
	if len(uid) == 0 || len(rv) == 0 || !printable(uid) || !printable(rv) {
		c.skipped++
		return nil, skip, nil
	}
	if n, err := strconv.ParseInt(string(rv), 10, 64); err == nil {
		if n <= c.lastRV {
			c.skipped++ // not newer
			return nil, skip, nil
		}
		c.lastRV = n
	}
	namespace := str(meta, "namespace")
	kind, name := str(involved, "kind"), str(involved, "name")
	reason := str(ev, "reason")
	count, ok := positiveInt(series.Get("count"))
	if !ok {
		if count, ok = positiveInt(ev.Get("count")); !ok {
			count = 1
		}
	}
	var when []byte
	for _, t := range [...][]byte{
		str(series, "lastObservedTime"),
		str(ev, "lastTimestamp"),
		str(ev, "eventTime"),
		str(meta, "creationTimestamp"),
	} {
		if t != nil && rfc3339(t) {
			when = t
			break
		}
	}
	obj := objectBytes(line, typ)
	var data1, data2 []byte
	if obj == nil { // any other shape: the object re-encoded, without managedFields
		if meta != nil && meta.Type() == fastjson.TypeObject {
			meta.Del("managedFields")
		}
		data1 = ev.MarshalTo(nil)
	} else if meta.Exists("managedFields") {
		data1, data2 = withoutManagedFields(obj)
	} else {
		data1 = obj
	}

	c.subject = append(c.subject[:0], c.prefix...)
	c.subject = token(c.subject, namespace)
	c.subject = append(c.subject, '.')
	c.subject = token(c.subject, kind)
	c.subject = append(c.subject, '.')
	c.subject = token(c.subject, reason)

	id := string(uid) + "/" + string(rv)
	p := make([]byte, 0, len(data1)+len(data2)+400+2*(len(namespace)+len(kind)+len(name)))
	p = append(p, `{"specversion":"1.0","id":"`...)
	p = appendString(p, []byte(id))
	p = append(p, `","source":"`...)
	p = appendString(p, c.source)
	if len(namespace) == 0 {
		p = append(p, '_')
	} else {
		p = appendString(p, namespace)
	}
	p = append(p, `","type":"`...)
	p = append(p, c.ceType(ev.Get("type"))...)
	p = append(p, `","subject":"`...)
	p = appendString(p, kind)
	p = append(p, '/')
	p = appendString(p, name)
	if when != nil {
		p = append(p, `","time":"`...)
		p = append(p, when...)
	}
	p = append(p, `","datacontenttype":"application/json","k8scluster":"`...)
	p = append(p, c.cluster...)
	p = append(p, `","k8snamespace":"`...)
	p = appendString(p, namespace)
	p = append(p, `","k8skind":"`...)
	p = appendString(p, kind)
	p = append(p, `","k8sname":"`...)
	p = appendString(p, name)
	p = append(p, `","k8sreason":"`...)
	p = appendString(p, reason)
	p = append(p, `","k8scount":`...)
	p = strconv.AppendInt(p, count, 10)
	p = append(p, `,"data":`...)
	p = append(p, data1...)
	p = append(p, data2...)
	p = append(p, '}')
	msg := &nats.Msg{
		Subject: string(c.subject),
		Data:    p,
		Header:  nats.Header{msgIDHeader: {id}, "Content-Type": {structuredContent}},
	}
	return msg, publish, nil
}

type result struct {
	Count     int64   `json:"count"`
	Errors    int64   `json:"errors"`
	Started   float64 `json:"started"`
	FirstAck  float64 `json:"first_ack"`
	LastAck   float64 `json:"last_ack"`
	CPU       float64 `json:"cpu_s"`
	PeakRSSKB int64   `json:"peak_rss_kb"`
	Window    int     `json:"window"`
	Lines     int64   `json:"lines"`
	Skipped   int     `json:"skipped"`
	Ignored   int     `json:"ignored"`
	Go        string  `json:"go"`
	Procs     int     `json:"gomaxprocs"`
}

func versionLine() string {
	out := "goref " + runtime.Version()
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, dep := range info.Deps {
			out += " " + dep.Path + "@" + dep.Version
		}
	}
	return out
}

func main() {
	api := flag.String("api", "", "the API server's URL")
	natsURL := flag.String("nats", "", "the NATS server's URL")
	rv := flag.String("rv", "", "watch from this resourceVersion")
	count := flag.Int64("count", 0, "stop after this many acks")
	window := flag.Int("window", 8192, "acks outstanding at most")
	timeout := flag.Float64("timeout", 60, "give up after this many seconds without progress")
	cluster := flag.String("cluster", "bench", "the cluster's name (source, subject, k8scluster)")
	prefix := flag.String("prefix", "goref.events", "the subject prefix")
	cpuProfile := flag.String("cpuprofile", "", "write a CPU profile (go tool pprof) to this file")
	showVersion := flag.Bool("version", false, "print the version and exit")
	flag.Parse()
	if *showVersion {
		fmt.Println(versionLine())
		return
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			fail("%v", err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			fail("%v", err)
		}
		defer pprof.StopCPUProfile()
	}
	if *api == "" || *natsURL == "" || *rv == "" || *count <= 0 || *window <= 0 {
		fmt.Fprintln(os.Stderr, "goref: --api, --nats, --rv and --count (> 0) are required")
		flag.Usage()
		os.Exit(2)
	}
	res := run(*api, *natsURL, *rv, *count, *window, *timeout, *cluster, *prefix)
	out, _ := json.Marshal(res)
	fmt.Println(string(out))
}

func run(api, natsURL, rv string, count int64, window int, timeout float64, cluster, prefix string) result {
	var acked, errs, progress atomic.Int64
	var firstAck, lastAck float64
	done := make(chan struct{})
	onAck := func(failed bool) {
		if failed {
			errs.Add(1)
		}
		n := acked.Add(1)
		progress.Add(1)
		if n == 1 {
			firstAck = monotonic()
		}
		if n == count {
			lastAck = monotonic()
			close(done)
		}
	}
	nc, err := nats.Connect(natsURL, nats.Name("goref"), nats.MaxReconnects(0))
	if err != nil {
		fail("connect to %s: %v", natsURL, err)
	}
	js, err := jetstream.New(nc,
		jetstream.WithPublishAsyncMaxPending(window),
		jetstream.WithPublishAsyncAckHandler(func(jetstream.JetStream, *nats.Msg, *jetstream.PubAck) {
			onAck(false)
		}),
		jetstream.WithPublishAsyncErrHandler(func(_ jetstream.JetStream, _ *nats.Msg, err error) {
			onAck(true)
		}),
	)
	if err != nil {
		fail("jetstream: %v", err)
	}
	// the watchdog: no line read and no ack for --timeout seconds
	go func() {
		last, since := progress.Load(), time.Now()
		for range time.Tick(250 * time.Millisecond) {
			if p := progress.Load(); p != last {
				last, since = p, time.Now()
			} else if time.Since(since).Seconds() > timeout {
				fail("no progress for %.0f s (%d of %d acked)", timeout, acked.Load(), count)
			}
		}
	}()

	cpu0 := cpuSeconds()
	started := monotonic()
	resp, err := http.Get(api + "/api/v1/events?watch=true&resourceVersion=" + rv)
	if err != nil {
		fail("watch: %v", err)
	}
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 2000))
		fail("watch: %s: %s", resp.Status, body)
	}
	conv := newConverter(prefix, cluster)
	br := bufio.NewReaderSize(resp.Body, 1<<20)
	var sent, lines int64
	for sent < count {
		line, rerr := br.ReadSlice('\n')
		if errors.Is(rerr, bufio.ErrBufferFull) { // longer than the buffer: copied together
			long := append([]byte(nil), line...)
			for errors.Is(rerr, bufio.ErrBufferFull) {
				line, rerr = br.ReadSlice('\n')
				long = append(long, line...)
			}
			line = long
		}
		line = bytes.TrimRight(line, "\r\n")
		if len(line) > 0 {
			lines++
			progress.Add(1)
			msg, what, err := conv.convert(line)
			if err != nil {
				fail("%v", err)
			}
			if what == publish {
				for {
					_, err := js.PublishMsgAsync(msg)
					if err == nil {
						break
					}
					if !errors.Is(err, jetstream.ErrTooManyStalledMsgs) {
						fail("publish: %v", err)
					}
				}
				sent++
			}
		}
		if rerr != nil && sent < count {
			fail("the watch ended after %d lines, %d of %d published: %v", lines, sent, count, rerr)
		}
	}
	<-done
	cpu1, peak := cpuSeconds(), peakRSS()
	resp.Body.Close()
	nc.Close()
	return result{
		Count:     acked.Load(),
		Errors:    errs.Load(),
		Started:   started,
		FirstAck:  firstAck,
		LastAck:   lastAck,
		CPU:       cpu1 - cpu0,
		PeakRSSKB: peak,
		Window:    window,
		Lines:     lines,
		Skipped:   conv.skipped,
		Ignored:   conv.ignored,
		Go:        runtime.Version(),
		Procs:     runtime.GOMAXPROCS(0),
	}
}
