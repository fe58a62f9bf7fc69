// sarama_producer: produces records to weir with a real sarama SyncProducer, for
// tests/test_sarama.py.
//
// It pins github.com/IBM/sarama v1.45.0 (go.mod), the last release that leaves a produced
// record batch's max_timestamp unset, so the header says -1 (IBM/sarama#3108, "produce: set
// MaxTimestamp", released in v1.45.1, sets it).
// Record i has key "k<i>", value "v<i>" (or "v<i>|" and -pad filler bytes, see filler) and
// timestamp -timestamp-ms + i * -timestamp-step-ms. Records go out in SendMessages calls of
// -batch records each, with sarama's flush settings at -batch, so most produced record
// batches hold -batch records.
//
// With -capture, every connection sarama dials is wrapped: the bytes it writes are parsed as
// Kafka requests, and each record batch of each Produce request is reported with the header's
// max_timestamp next to the max of its records' timestamps (decompressed when compressed), so
// a test can see what sarama itself put on the wire.
//
// Output: one line of JSON on stdout, {"sarama": version, "acked": n, "count": n,
// "batches": [...]} (batches with -capture); exit status 1 on any error (with "error" set).
package main

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	"github.com/IBM/sarama"
	snappy "github.com/eapache/go-xerial-snappy"
	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"
)

type result struct {
	Sarama  string      `json:"sarama"`
	Acked   int         `json:"acked"`
	Count   int         `json:"count"`
	Batches []batchInfo `json:"batches,omitempty"`
	Error   string      `json:"error,omitempty"`
}

// batchInfo is one record batch as sarama sent it in a Produce request.
type batchInfo struct {
	Topic          string `json:"topic"`
	Partition      int32  `json:"partition"`
	ProduceVersion int16  `json:"produce_version"`
	Magic          int8   `json:"magic"`
	Codec          int16  `json:"codec"`
	Records        int32  `json:"records"`
	FirstTimestamp int64  `json:"first_timestamp"`
	MaxTimestamp   int64  `json:"max_timestamp"`
	TrueMax        int64  `json:"true_max_timestamp"`
	ProducerID     int64  `json:"producer_id"`
	BaseSequence   int32  `json:"base_sequence"`
}

// filler is n bytes of SHA-256 output (blocks sha256("<i>/<j>")), incompressible and easy to
// recompute in a test.
func filler(i, n int) []byte {
	var out []byte
	for j := 0; len(out) < n; j++ {
		sum := sha256.Sum256([]byte(fmt.Sprintf("%d/%d", i, j)))
		out = append(out, sum[:]...)
	}
	return out[:n]
}

func main() {
	brokers := flag.String("brokers", "127.0.0.1:9092", "bootstrap brokers, comma-separated")
	topic := flag.String("topic", "", "topic to produce to")
	count := flag.Int("count", 100, "number of records")
	tsMs := flag.Int64("timestamp-ms", 0, "timestamp of record 0 in ms since the epoch (0: now)")
	stepMs := flag.Int64("timestamp-step-ms", 0, "record i is stamped timestamp-ms + i * this")
	compression := flag.String("compression", "none", "none, gzip, snappy, lz4 or zstd")
	idempotent := flag.Bool("idempotent", false, "idempotent producer (acks=all, one request in flight)")
	batch := flag.Int("batch", 10, "records per SendMessages call and per flush")
	pad := flag.Int("pad", 0, "filler bytes appended to each value (value \"v<i>|\" + filler)")
	version := flag.String("kafka-version", "2.1.0", "Kafka version sarama assumes (2.1.0: Produce v7, record batches v2)")
	capture := flag.Bool("capture", false, "report the record batch headers sarama writes")
	flag.Parse()

	res := result{Sarama: saramaVersion(), Count: *count}
	fail := func(err error) {
		res.Error = err.Error()
		emit(res)
		os.Exit(1)
	}
	if *topic == "" {
		fail(errors.New("-topic is required"))
	}
	if *batch < 1 {
		fail(errors.New("-batch must be at least 1"))
	}

	cfg := sarama.NewConfig()
	v, err := sarama.ParseKafkaVersion(*version)
	if err != nil {
		fail(err)
	}
	cfg.Version = v
	cfg.ClientID = "weir-sarama-test"
	cfg.Producer.Return.Successes = true
	cfg.Producer.Return.Errors = true
	cfg.Producer.RequiredAcks = sarama.WaitForAll
	cfg.Producer.Flush.Messages = *batch
	cfg.Producer.Flush.MaxMessages = *batch
	cfg.Producer.Flush.Frequency = 20 * time.Millisecond
	cfg.Producer.Retry.Max = 5
	cfg.Producer.Timeout = 10 * time.Second
	cfg.Net.DialTimeout = 10 * time.Second
	cfg.Net.ReadTimeout = 20 * time.Second
	cfg.Net.WriteTimeout = 20 * time.Second
	cfg.Metadata.Retry.Max = 10
	cfg.Metadata.Retry.Backoff = 200 * time.Millisecond
	switch *compression {
	case "none":
		cfg.Producer.Compression = sarama.CompressionNone
	case "gzip":
		cfg.Producer.Compression = sarama.CompressionGZIP
	case "snappy":
		cfg.Producer.Compression = sarama.CompressionSnappy
	case "lz4":
		cfg.Producer.Compression = sarama.CompressionLZ4
	case "zstd":
		cfg.Producer.Compression = sarama.CompressionZSTD
	default:
		fail(fmt.Errorf("unknown -compression %q", *compression))
	}
	if *idempotent {
		cfg.Producer.Idempotent = true
		cfg.Net.MaxOpenRequests = 1
	}
	var rec *recorder
	if *capture {
		rec = &recorder{}
		cfg.Net.Proxy.Enable = true
		cfg.Net.Proxy.Dialer = &capturingDialer{d: &net.Dialer{Timeout: cfg.Net.DialTimeout}, rec: rec}
	}

	producer, err := sarama.NewSyncProducer(strings.Split(*brokers, ","), cfg)
	if err != nil {
		fail(fmt.Errorf("new producer: %w", err))
	}
	base := *tsMs
	if base == 0 {
		base = time.Now().UnixMilli()
	}
	var sendErr error
	for start := 0; start < *count && sendErr == nil; start += *batch {
		end := min(start+*batch, *count)
		msgs := make([]*sarama.ProducerMessage, 0, end-start)
		for i := start; i < end; i++ {
			value := []byte(fmt.Sprintf("v%d", i))
			if *pad > 0 {
				value = append(append(value, '|'), filler(i, *pad)...)
			}
			msgs = append(msgs, &sarama.ProducerMessage{
				Topic:     *topic,
				Key:       sarama.StringEncoder(fmt.Sprintf("k%d", i)),
				Value:     sarama.ByteEncoder(value),
				Timestamp: time.UnixMilli(base + int64(i)**stepMs),
			})
		}
		err := producer.SendMessages(msgs)
		failed := 0
		var perrs sarama.ProducerErrors
		if errors.As(err, &perrs) {
			failed = len(perrs)
		} else if err != nil {
			failed = len(msgs)
		}
		res.Acked += len(msgs) - failed
		if err != nil {
			sendErr = fmt.Errorf("records %d..%d: %w", start, end-1, err)
		}
	}
	if err := producer.Close(); err != nil && sendErr == nil {
		sendErr = fmt.Errorf("close: %w", err)
	}
	if rec != nil {
		res.Batches = rec.batches
		if rec.err != nil && sendErr == nil {
			sendErr = fmt.Errorf("capture: %w", rec.err)
		}
	}
	if sendErr != nil {
		fail(sendErr)
	}
	emit(res)
}

func emit(r result) {
	b, _ := json.Marshal(r)
	fmt.Println(string(b))
}

func saramaVersion() string {
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, d := range info.Deps {
			if d.Path == "github.com/IBM/sarama" {
				return d.Version
			}
		}
	}
	return "unknown"
}

// -- capture -----------------------------------------------------------------------------------

type recorder struct {
	mu      sync.Mutex
	batches []batchInfo
	err     error
}

func (r *recorder) fail(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.err == nil {
		r.err = err
	}
}

// capturingDialer is sarama's Net.Proxy.Dialer: a plain dial whose connection reports what
// sarama writes.
type capturingDialer struct {
	d   *net.Dialer
	rec *recorder
}

func (c *capturingDialer) Dial(network, addr string) (net.Conn, error) {
	conn, err := c.d.Dial(network, addr)
	if err != nil {
		return nil, err
	}
	return &capturingConn{Conn: conn, rec: c.rec}, nil
}

type capturingConn struct {
	net.Conn
	rec *recorder
	mu  sync.Mutex
	buf []byte // written bytes not yet parsed as a whole request
}

func (c *capturingConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	c.buf = append(c.buf, p...)
	for len(c.buf) >= 4 {
		size := int(binary.BigEndian.Uint32(c.buf))
		if len(c.buf) < 4+size {
			break
		}
		if err := c.rec.request(c.buf[4 : 4+size]); err != nil {
			c.rec.fail(err)
		}
		c.buf = c.buf[4+size:]
	}
	c.mu.Unlock()
	return c.Conn.Write(p)
}

// reader decodes the big-endian fields of a request; the first error sticks.
type reader struct {
	b   []byte
	err error
}

func (r *reader) take(n int) []byte {
	if r.err != nil {
		return nil
	}
	if n < 0 || n > len(r.b) {
		r.err = fmt.Errorf("truncated: need %d bytes, have %d", n, len(r.b))
		return nil
	}
	out := r.b[:n]
	r.b = r.b[n:]
	return out
}

func (r *reader) i8() int8 {
	if b := r.take(1); b != nil {
		return int8(b[0])
	}
	return 0
}

func (r *reader) i16() int16 {
	if b := r.take(2); b != nil {
		return int16(binary.BigEndian.Uint16(b))
	}
	return 0
}

func (r *reader) i32() int32 {
	if b := r.take(4); b != nil {
		return int32(binary.BigEndian.Uint32(b))
	}
	return 0
}

func (r *reader) i64() int64 {
	if b := r.take(8); b != nil {
		return int64(binary.BigEndian.Uint64(b))
	}
	return 0
}

func (r *reader) str() string {
	n := r.i16()
	if n < 0 {
		return ""
	}
	return string(r.take(int(n)))
}

func (r *reader) varint() int64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Varint(r.b) // zigzag, as Kafka's varints
	if n <= 0 {
		r.err = errors.New("bad varint")
		return 0
	}
	r.b = r.b[n:]
	return v
}

// request parses one request (header v1, without the size); Produce v3..v8 requests (the
// non-flexible ones with record batches) are recorded, others ignored.
func (rec *recorder) request(b []byte) error {
	r := &reader{b: b}
	apiKey, apiVersion := r.i16(), r.i16()
	r.i32() // correlation id
	r.str() // client id
	if r.err != nil {
		return r.err
	}
	if apiKey != 0 {
		return nil
	}
	if apiVersion < 3 || apiVersion > 8 {
		return fmt.Errorf("Produce v%d: only v3..v8 are parsed", apiVersion)
	}
	r.str() // transactional id
	r.i16() // acks
	r.i32() // timeout
	var found []batchInfo
	for nt := r.i32(); nt > 0 && r.err == nil; nt-- {
		topic := r.str()
		for np := r.i32(); np > 0 && r.err == nil; np-- {
			partition := r.i32()
			size := r.i32()
			if size < 0 {
				continue
			}
			records := r.take(int(size))
			for len(records) > 0 && r.err == nil {
				info, n, err := parseBatch(records)
				if err != nil {
					return fmt.Errorf("%s-%d: %w", topic, partition, err)
				}
				info.Topic, info.Partition, info.ProduceVersion = topic, partition, apiVersion
				found = append(found, info)
				records = records[n:]
			}
		}
	}
	if r.err != nil {
		return fmt.Errorf("Produce v%d: %w", apiVersion, r.err)
	}
	rec.mu.Lock()
	rec.batches = append(rec.batches, found...)
	rec.mu.Unlock()
	return nil
}

// parseBatch reads the record batch (v2) at the start of b: its header and the max of its
// records' timestamps; returns the bytes it spans.
func parseBatch(b []byte) (batchInfo, int, error) {
	r := &reader{b: b}
	r.i64() // base offset
	length := r.i32()
	if r.err != nil || length < 0 || int(length) > len(r.b) {
		return batchInfo{}, 0, fmt.Errorf("batch length %d, %d bytes left", length, len(r.b))
	}
	total := 12 + int(length)
	r.b = r.b[:length]
	r.i32() // partition leader epoch
	info := batchInfo{Magic: r.i8()}
	if info.Magic != 2 {
		return batchInfo{}, 0, fmt.Errorf("magic %d, want 2", info.Magic)
	}
	r.i32() // crc
	attributes := r.i16()
	info.Codec = attributes & 7
	r.i32() // last offset delta
	info.FirstTimestamp = r.i64()
	info.MaxTimestamp = r.i64()
	info.ProducerID = r.i64()
	r.i16() // producer epoch
	info.BaseSequence = r.i32()
	info.Records = r.i32()
	if r.err != nil {
		return batchInfo{}, 0, r.err
	}
	body, err := decompress(info.Codec, r.b)
	if err != nil {
		return batchInfo{}, 0, err
	}
	info.TrueMax = -1
	rr := &reader{b: body}
	for i := int32(0); i < info.Records; i++ {
		n := rr.varint()
		rec := &reader{b: rr.take(int(n))}
		rec.i8() // attributes
		ts := info.FirstTimestamp + rec.varint()
		if rr.err != nil || rec.err != nil {
			return batchInfo{}, 0, fmt.Errorf("record %d: %v %v", i, rr.err, rec.err)
		}
		info.TrueMax = max(info.TrueMax, ts)
	}
	return info, total, nil
}

func decompress(codec int16, b []byte) ([]byte, error) {
	switch codec {
	case 0:
		return b, nil
	case 1:
		z, err := gzip.NewReader(bytes.NewReader(b))
		if err != nil {
			return nil, err
		}
		return io.ReadAll(z)
	case 2:
		return snappy.Decode(b)
	case 3:
		return io.ReadAll(lz4.NewReader(bytes.NewReader(b)))
	case 4:
		d, err := zstd.NewReader(nil)
		if err != nil {
			return nil, err
		}
		defer d.Close()
		return d.DecodeAll(b, nil)
	}
	return nil, fmt.Errorf("unknown codec %d", codec)
}
