// sarama_scenarios: user scenarios of the sarama Go client (github.com/IBM/sarama, pinned in
// go.mod) against weir, for tests/test_sarama_scenarios.py.
//
//	sarama_scenarios idempotent -brokers B -topic T -partitions P -count N
//	    An idempotent AsyncProducer (acks=all, one request in flight, retries for up to a
//	    minute) writes "p:seq" for seq 0..N-1 to each partition p, paced so that the test can
//	    kill -9 the broker mid-run. Prints "acked K" lines as acknowledgements arrive, then a
//	    JSON line with the offset sarama reported for every record.
//	sarama_scenarios txn -brokers B -topic T -group G
//	    A transactional SyncProducer: a committed, an aborted and a still-open transaction,
//	    observed by read_committed and read_uncommitted consumers; offsets committed inside an
//	    aborted and a committed transaction (AddOffsetsToTxn); fencing by a second producer
//	    with the same transactional id.
//	sarama_scenarios group -brokers B -topic T -group G
//	    Consumer groups: one member takes every partition, a second joins and gets half
//	    (resuming from the first member's commits), the second leaves and the first gets
//	    everything back at once, then a new member resumes from the committed offsets.
//	sarama_scenarios old -brokers B -topic T -group G
//	    The request versions KIP-896 removed, as sarama sends them when Config.Version
//	    names an old Kafka or a request is built at an old version (old_versions.go).
//	sarama_scenarios list0 -brokers B -topic T [-user U -password P]
//	    One ListOffsets v0, over SASL/PLAIN with a user: the error and offsets listed.
//
// Every subcommand ends with one JSON line on stdout; it exits 1 on an error it cannot
// report otherwise (with "error" set). The test asserts on the JSON.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"runtime/debug"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/IBM/sarama"
)

var (
	brokersFlag  = flag.String("brokers", "127.0.0.1:9092", "bootstrap brokers, comma-separated")
	topicFlag    = flag.String("topic", "", "topic")
	groupFlag    = flag.String("group", "", "consumer group")
	partsFlag    = flag.Int("partitions", 3, "partitions of the topic (idempotent)")
	countFlag    = flag.Int("count", 1000, "records per partition (idempotent)")
	pauseFlag    = flag.Duration("pause", 10*time.Millisecond, "pause between batches of 10 records per partition (idempotent)")
	versionFlag  = flag.String("version", "4.0.0", "sarama's Config.Version (the Kafka version it assumes)")
	verboseFlag  = flag.Bool("v", false, "sarama's log on stderr")
	userFlag     = flag.String("user", "", "SASL/PLAIN user (list0)")
	passwordFlag = flag.String("password", "", "SASL/PLAIN password (list0)")
	restartFlag  = flag.Bool("restart-handshake", false, "group: once the group is empty, print RESTART and wait for a line on stdin (the test restarts the broker) before phase 4")
)

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

func brokers() []string { return strings.Split(*brokersFlag, ",") }

func baseConfig() *sarama.Config {
	cfg := sarama.NewConfig()
	v, err := sarama.ParseKafkaVersion(*versionFlag)
	if err != nil {
		fail(map[string]any{}, err)
	}
	cfg.Version = v
	cfg.ClientID = "weir-sarama-scenarios"
	cfg.Net.DialTimeout = 3 * time.Second
	cfg.Net.ReadTimeout = 30 * time.Second
	cfg.Net.WriteTimeout = 30 * time.Second
	cfg.Metadata.Retry.Max = 100
	cfg.Metadata.Retry.Backoff = 200 * time.Millisecond
	return cfg
}

func emit(out map[string]any) {
	out["sarama"] = saramaVersion()
	b, err := json.Marshal(out)
	if err != nil {
		panic(err)
	}
	fmt.Println(string(b))
}

func fail(out map[string]any, err error) {
	out["error"] = err.Error()
	emit(out)
	os.Exit(1)
}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: sarama_scenarios idempotent|txn|group|old|list0 [flags]")
		os.Exit(2)
	}
	cmd := os.Args[1]
	if err := flag.CommandLine.Parse(os.Args[2:]); err != nil {
		os.Exit(2)
	}
	if *verboseFlag {
		sarama.Logger = log.New(os.Stderr, "[sarama] ", log.LstdFlags|log.Lmicroseconds)
	}
	switch cmd {
	case "idempotent":
		idempotent()
	case "txn":
		txn()
	case "group":
		group()
	case "old":
		oldVersions()
	case "list0":
		listV0()
	default:
		fmt.Fprintf(os.Stderr, "unknown subcommand %q\n", cmd)
		os.Exit(2)
	}
}

// ---- idempotent producer across kill -9 ------------------------------------------------------

// retryCounter is sarama's logger during the idempotent run: it counts the "state change to
// [retrying]" lines (a batch sent again), and passes everything on to stderr with -v.
type retryCounter struct {
	mu      sync.Mutex
	retries int
	reasons map[string]int
}

func (r *retryCounter) Write(p []byte) (int, error) {
	line := string(p)
	if strings.Contains(line, "state change to [retrying") {
		r.mu.Lock()
		r.retries++
		if i := strings.Index(line, " because "); i >= 0 {
			r.reasons[strings.TrimSpace(line[i+9:])]++
		}
		r.mu.Unlock()
	}
	if *verboseFlag {
		return os.Stderr.Write(p)
	}
	return len(p), nil
}

func idempotent() {
	out := map[string]any{}
	rc := &retryCounter{reasons: map[string]int{}}
	sarama.Logger = log.New(rc, "[sarama] ", log.LstdFlags|log.Lmicroseconds)
	cfg := baseConfig()
	cfg.Producer.Idempotent = true
	cfg.Producer.RequiredAcks = sarama.WaitForAll
	cfg.Net.MaxOpenRequests = 1
	cfg.Producer.Partitioner = sarama.NewManualPartitioner
	cfg.Producer.Return.Successes = true
	cfg.Producer.Return.Errors = true
	cfg.Producer.Retry.Max = 600 // with the backoff below: a minute for the broker to come back
	cfg.Producer.Retry.Backoff = 100 * time.Millisecond
	cfg.Producer.Flush.Messages = 10
	cfg.Producer.Flush.Frequency = 5 * time.Millisecond
	cfg.Producer.Timeout = 10 * time.Second
	p, err := sarama.NewAsyncProducer(brokers(), cfg)
	if err != nil {
		fail(out, fmt.Errorf("NewAsyncProducer: %w", err))
	}
	total := *partsFlag * *countFlag
	// offsets[p][seq]: the offset sarama reported for record "p:seq" (-1: not acked).
	offsets := make([][]int64, *partsFlag)
	for i := range offsets {
		offsets[i] = make([]int64, *countFlag)
		for j := range offsets[i] {
			offsets[i][j] = -1
		}
	}
	errs := []string{}
	var mu sync.Mutex
	done := make(chan struct{})
	go func() {
		defer close(done)
		acked, failed := 0, 0
		succ, errc := p.Successes(), p.Errors()
		for acked+failed < total {
			select {
			case m := <-succ:
				seq := m.Metadata.(int)
				mu.Lock()
				if offsets[m.Partition][seq] != -1 {
					errs = append(errs, fmt.Sprintf("%d:%d acked twice", m.Partition, seq))
				}
				offsets[m.Partition][seq] = m.Offset
				mu.Unlock()
				acked++
				if acked%50 == 0 || acked == total {
					fmt.Printf("acked %d\n", acked)
				}
			case e := <-errc:
				failed++
				mu.Lock()
				if len(errs) < 50 {
					errs = append(errs, fmt.Sprintf("%d:%v: %v", e.Msg.Partition, e.Msg.Metadata, e.Err))
				}
				mu.Unlock()
			}
		}
	}()
	start := time.Now()
	for seq := 0; seq < *countFlag; seq++ {
		for part := 0; part < *partsFlag; part++ {
			p.Input() <- &sarama.ProducerMessage{
				Topic:     *topicFlag,
				Partition: int32(part),
				Key:       sarama.StringEncoder(fmt.Sprintf("k%d", seq)),
				Value:     sarama.StringEncoder(fmt.Sprintf("%d:%d", part, seq)),
				Metadata:  seq,
			}
		}
		if seq%10 == 9 {
			time.Sleep(*pauseFlag)
		}
	}
	select {
	case <-done:
	case <-time.After(120 * time.Second):
		mu.Lock()
		errs = append(errs, "not every record was acknowledged or failed within 120 s of the last send")
		mu.Unlock()
	}
	if err := p.Close(); err != nil {
		mu.Lock()
		errs = append(errs, fmt.Sprintf("Close: %v", err))
		mu.Unlock()
	}
	mu.Lock()
	defer mu.Unlock()
	out["offsets"] = offsets
	out["errors"] = errs
	out["seconds"] = time.Since(start).Seconds()
	rc.mu.Lock()
	out["retries"] = rc.retries
	out["retry_reasons"] = rc.reasons
	rc.mu.Unlock()
	emit(out)
}

// ---- transactions ---------------------------------------------------------------------------

func txnProducer(id string) (sarama.SyncProducer, error) {
	cfg := baseConfig()
	cfg.Producer.Idempotent = true
	cfg.Producer.RequiredAcks = sarama.WaitForAll
	cfg.Net.MaxOpenRequests = 1
	cfg.Producer.Return.Successes = true
	cfg.Producer.Transaction.ID = id
	cfg.Producer.Transaction.Timeout = 60 * time.Second
	cfg.Producer.Partitioner = sarama.NewRoundRobinPartitioner
	return sarama.NewSyncProducer(brokers(), cfg)
}

func sendTxn(p sarama.SyncProducer, prefix string, n int) error {
	msgs := make([]*sarama.ProducerMessage, n)
	for i := range msgs {
		msgs[i] = &sarama.ProducerMessage{Topic: *topicFlag, Value: sarama.StringEncoder(fmt.Sprintf("%s-%d", prefix, i))}
	}
	return p.SendMessages(msgs)
}

// readAll reads every partition of the topic from the oldest offset with the isolation
// level given until `want` records came (then `extra` more to catch records that should not
// be there) or `limit` passed; the values, sorted.
func readAll(level sarama.IsolationLevel, want int, extra, limit time.Duration) ([]string, error) {
	cfg := baseConfig()
	cfg.Consumer.IsolationLevel = level
	cfg.Consumer.MaxWaitTime = 100 * time.Millisecond
	c, err := sarama.NewConsumer(brokers(), cfg)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	parts, err := c.Partitions(*topicFlag)
	if err != nil {
		return nil, err
	}
	msgs := make(chan string, 1024)
	var pcs []sarama.PartitionConsumer
	for _, part := range parts {
		pc, err := c.ConsumePartition(*topicFlag, part, sarama.OffsetOldest)
		if err != nil {
			return nil, fmt.Errorf("ConsumePartition %d: %w", part, err)
		}
		pcs = append(pcs, pc)
		go func() {
			for m := range pc.Messages() {
				msgs <- string(m.Value)
			}
		}()
	}
	defer func() {
		for _, pc := range pcs {
			pc.AsyncClose()
		}
	}()
	var got []string
	deadline := time.After(limit)
	var extraC <-chan time.Time
	if want == 0 {
		extraC = time.After(extra)
	}
loop:
	for {
		select {
		case v := <-msgs:
			got = append(got, v)
			if len(got) == want {
				extraC = time.After(extra)
			}
		case <-extraC:
			break loop
		case <-deadline:
			break loop
		}
	}
	sort.Strings(got)
	return got, nil
}

func committedOffset(admin sarama.ClusterAdmin, group string, part int32) (int64, error) {
	resp, err := admin.ListConsumerGroupOffsets(group, map[string][]int32{*topicFlag: {part}})
	if err != nil {
		return 0, err
	}
	b := resp.GetBlock(*topicFlag, part)
	if b == nil {
		return 0, errors.New("no block in the OffsetFetch response")
	}
	if b.Err != sarama.ErrNoError {
		return 0, b.Err
	}
	return b.Offset, nil
}

func txn() {
	out := map[string]any{}
	step := func(name string, err error) {
		if err != nil {
			fail(out, fmt.Errorf("%s: %w", name, err))
		}
	}
	id := "sarama-txn-" + *topicFlag
	p, err := txnProducer(id)
	step("NewSyncProducer (transactional)", err)

	step("BeginTxn 1", p.BeginTxn())
	step("send committed", sendTxn(p, "committed", 30))
	step("CommitTxn 1", p.CommitTxn())

	step("BeginTxn 2", p.BeginTxn())
	step("send aborted", sendTxn(p, "aborted", 30))
	step("AbortTxn 2", p.AbortTxn())

	step("BeginTxn 3", p.BeginTxn())
	step("send open", sendTxn(p, "open", 30))
	// While transaction 3 is open: read_committed stops at its first record (the LSO).
	rc, err := readAll(sarama.ReadCommitted, 30, 1500*time.Millisecond, 20*time.Second)
	step("read_committed while open", err)
	out["read_committed_while_open"] = rc
	ru, err := readAll(sarama.ReadUncommitted, 90, 1000*time.Millisecond, 20*time.Second)
	step("read_uncommitted while open", err)
	out["read_uncommitted_while_open"] = ru
	step("CommitTxn 3", p.CommitTxn())
	rc, err = readAll(sarama.ReadCommitted, 60, 1500*time.Millisecond, 20*time.Second)
	step("read_committed after commit", err)
	out["read_committed_after_commit"] = rc

	// Offsets sent to a group inside transactions: only the committed one counts.
	admin, err := sarama.NewClusterAdmin(brokers(), baseConfig())
	step("NewClusterAdmin", err)
	defer admin.Close()
	offs := func(o int64) map[string][]*sarama.PartitionOffsetMetadata {
		return map[string][]*sarama.PartitionOffsetMetadata{*topicFlag: {{Partition: 0, Offset: o}}}
	}
	step("BeginTxn 4", p.BeginTxn())
	step("AddOffsetsToTxn 11", p.AddOffsetsToTxn(offs(11), *groupFlag))
	step("AbortTxn 4", p.AbortTxn())
	o, err := committedOffset(admin, *groupFlag, 0)
	step("OffsetFetch after abort", err)
	out["group_offset_after_abort"] = o
	step("BeginTxn 5", p.BeginTxn())
	step("AddOffsetsToTxn 7", p.AddOffsetsToTxn(offs(7), *groupFlag))
	step("send with offsets", sendTxn(p, "with-offsets", 3))
	step("CommitTxn 5", p.CommitTxn())
	o, err = committedOffset(admin, *groupFlag, 0)
	step("OffsetFetch after commit", err)
	out["group_offset_after_commit"] = o

	// Fencing: a second producer with the same transactional id bumps the epoch; the first
	// one's next transaction fails, and what it sent is never visible.
	step("BeginTxn 6", p.BeginTxn())
	p2, err := txnProducer(id)
	step("second producer with the same transactional id", err)
	sendErr := sendTxn(p, "zombie", 3)
	var commitErr error
	if sendErr == nil {
		commitErr = p.CommitTxn()
	}
	var perrs sarama.ProducerErrors
	if errors.As(sendErr, &perrs) && len(perrs) > 0 {
		sendErr = perrs[0].Err // each record's own error
	}
	out["zombie_send_error"] = fmt.Sprint(sendErr)
	out["zombie_commit_error"] = fmt.Sprint(commitErr)
	out["zombie_fenced"] = errors.Is(sendErr, sarama.ErrProducerFenced) || errors.Is(commitErr, sarama.ErrProducerFenced)
	_ = p.Close()
	step("BeginTxn (second producer)", p2.BeginTxn())
	step("send second", sendTxn(p2, "second", 3))
	step("CommitTxn (second producer)", p2.CommitTxn())
	_ = p2.Close()
	rc, err = readAll(sarama.ReadCommitted, 66, 1500*time.Millisecond, 20*time.Second)
	step("read_committed at the end", err)
	out["read_committed_end"] = rc
	emit(out)
}

// ---- consumer groups ------------------------------------------------------------------------

type record struct {
	Member    string `json:"member"`
	Partition int32  `json:"partition"`
	Offset    int64  `json:"offset"`
	Value     string `json:"value"`
}

// member is one sarama ConsumerGroup consuming the topic in a loop, recording what it gets
// and the partitions of each generation.
type member struct {
	name   string
	cg     sarama.ConsumerGroup
	cancel context.CancelFunc
	done   chan struct{}

	mu      sync.Mutex
	claims  []int32 // of the current generation
	gens    []map[string]any
	records []record
	errs    []string
}

func (m *member) Setup(s sarama.ConsumerGroupSession) error {
	var parts []int32
	for _, ps := range s.Claims() {
		parts = append(parts, ps...)
	}
	sort.Slice(parts, func(i, j int) bool { return parts[i] < parts[j] })
	m.mu.Lock()
	m.claims = parts
	m.gens = append(m.gens, map[string]any{"generation": s.GenerationID(), "partitions": parts, "at": time.Now().UnixMilli()})
	m.mu.Unlock()
	return nil
}

func (m *member) Cleanup(sarama.ConsumerGroupSession) error {
	m.mu.Lock()
	m.claims = nil
	m.mu.Unlock()
	return nil
}

func (m *member) ConsumeClaim(s sarama.ConsumerGroupSession, c sarama.ConsumerGroupClaim) error {
	for msg := range c.Messages() {
		m.mu.Lock()
		m.records = append(m.records, record{m.name, msg.Partition, msg.Offset, string(msg.Value)})
		m.mu.Unlock()
		s.MarkMessage(msg, "")
	}
	return nil
}

func (m *member) current() []int32 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]int32(nil), m.claims...)
}

func (m *member) count() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.records)
}

func startMember(name string) (*member, error) {
	cfg := baseConfig()
	cfg.Consumer.Offsets.Initial = sarama.OffsetOldest
	cfg.Consumer.Offsets.AutoCommit.Interval = 200 * time.Millisecond
	cfg.Consumer.Group.Session.Timeout = 30 * time.Second // a leave must not wait for this
	cfg.Consumer.Group.Heartbeat.Interval = 1 * time.Second
	cfg.Consumer.Group.Rebalance.Timeout = 20 * time.Second
	cfg.Consumer.MaxWaitTime = 100 * time.Millisecond
	cfg.Consumer.Return.Errors = true
	cg, err := sarama.NewConsumerGroup(brokers(), *groupFlag, cfg)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	m := &member{name: name, cg: cg, cancel: cancel, done: make(chan struct{})}
	go func() {
		for e := range cg.Errors() {
			m.mu.Lock()
			if len(m.errs) < 20 {
				m.errs = append(m.errs, e.Error())
			}
			m.mu.Unlock()
		}
	}()
	go func() {
		defer close(m.done)
		for ctx.Err() == nil {
			if err := cg.Consume(ctx, []string{*topicFlag}, m); err != nil {
				m.mu.Lock()
				m.errs = append(m.errs, "Consume: "+err.Error())
				m.mu.Unlock()
				if errors.Is(err, sarama.ErrClosedConsumerGroup) {
					return
				}
				time.Sleep(200 * time.Millisecond)
			}
		}
	}()
	return m, nil
}

// stop leaves the group (LeaveGroup, after committing what was marked).
func (m *member) stop() error {
	m.cancel()
	<-m.done
	return m.cg.Close()
}

func (m *member) report() map[string]any {
	m.mu.Lock()
	defer m.mu.Unlock()
	return map[string]any{"generations": m.gens, "records": m.records, "errors": m.errs}
}

func waitFor(what string, limit time.Duration, cond func() bool) (float64, error) {
	start := time.Now()
	for !cond() {
		if time.Since(start) > limit {
			return 0, fmt.Errorf("%s: not within %v", what, limit)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return time.Since(start).Seconds(), nil
}

func group() {
	out := map[string]any{}
	var members []*member
	step := func(name string, err error) {
		if err != nil {
			for _, m := range members {
				out[m.name] = m.report()
			}
			fail(out, fmt.Errorf("%s: %w", name, err))
		}
	}
	pcfg := baseConfig()
	pcfg.Producer.RequiredAcks = sarama.WaitForAll
	pcfg.Producer.Return.Successes = true
	pcfg.Producer.Partitioner = sarama.NewManualPartitioner
	pcfg.Producer.Retry.Max = 50 // across the broker restart
	pcfg.Producer.Retry.Backoff = 200 * time.Millisecond
	prod, err := sarama.NewSyncProducer(brokers(), pcfg)
	step("NewSyncProducer", err)
	client, err := sarama.NewClient(brokers(), baseConfig())
	step("NewClient", err)
	parts, err := client.Partitions(*topicFlag)
	step("Partitions", err)
	out["partitions"] = len(parts)
	produce := func(phase string, perPart int) {
		var msgs []*sarama.ProducerMessage
		for _, part := range parts {
			for i := 0; i < perPart; i++ {
				msgs = append(msgs, &sarama.ProducerMessage{Topic: *topicFlag, Partition: part,
					Value: sarama.StringEncoder(fmt.Sprintf("%s:%d:%d", phase, part, i))})
			}
		}
		step("produce "+phase, prod.SendMessages(msgs))
	}
	total := func() int {
		n := 0
		for _, m := range members {
			n += m.count()
		}
		return n
	}
	all := len(parts)
	const perPart = 25

	// 1. One member: every partition; it reads phase 1 from the oldest offset.
	produce("p1", perPart)
	a, err := startMember("a")
	step("start member a", err)
	members = append(members, a)
	_, err = waitFor("member a assigned every partition", 60*time.Second, func() bool { return len(a.current()) == all })
	step("phase 1", err)
	_, err = waitFor("member a consumed phase 1", 30*time.Second, func() bool { return total() >= all*perPart })
	step("phase 1", err)

	// 2. A second member joins: the partitions are split between the two; b resumes its
	// partitions where a committed (phase 1 is not read again); phase 2 is read once.
	b, err := startMember("b")
	step("start member b", err)
	members = append(members, b)
	split := func() bool {
		ca, cb := a.current(), b.current()
		return len(ca) > 0 && len(cb) > 0 && len(ca)+len(cb) == all
	}
	secs, err := waitFor("a and b share the partitions", 60*time.Second, split)
	step("phase 2", err)
	out["join_rebalance_seconds"] = secs
	out["split_a"], out["split_b"] = a.current(), b.current()
	produce("p2", perPart)
	_, err = waitFor("a and b consumed phase 2", 30*time.Second, func() bool { return total() >= 2*all*perPart })
	step("phase 2", err)
	time.Sleep(1 * time.Second) // anything read twice shows up now

	// 3. b leaves (LeaveGroup): a gets every partition back long before the 30 s session
	// timeout, and reads phase 3 alone, from where b committed.
	left := time.Now()
	step("member b leaves", b.stop())
	_, err = waitFor("a owns every partition again after b left", 60*time.Second, func() bool { return len(a.current()) == all })
	step("phase 3", err)
	out["leave_rebalance_seconds"] = time.Since(left).Seconds()
	produce("p3", perPart)
	_, err = waitFor("a consumed phase 3", 30*time.Second, func() bool { return total() >= 3*all*perPart })
	step("phase 3", err)
	time.Sleep(1 * time.Second)

	// 4. a leaves too; phase 4 is produced while the group is empty; a new member c resumes
	// from the committed offsets: it reads phase 4 only.
	step("member a leaves", a.stop())
	admin, err := sarama.NewClusterAdminFromClient(client)
	step("NewClusterAdmin", err)
	committed := map[int32]int64{}
	for _, part := range parts {
		o, err := committedOffset(admin, *groupFlag, part)
		step("OffsetFetch", err)
		committed[part] = o
	}
	out["committed_when_empty"] = committed
	if *restartFlag {
		fmt.Println("RESTART")
		if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
			step("waiting for the broker restart", err)
		}
		after := map[int32]int64{}
		_, err = waitFor("OffsetFetch answered after the restart", 60*time.Second, func() bool {
			for _, part := range parts {
				o, err := committedOffset(admin, *groupFlag, part)
				if err != nil {
					return false
				}
				after[part] = o
			}
			return true
		})
		step("after the restart", err)
		out["committed_after_restart"] = after
	}
	produce("p4", perPart)
	c, err := startMember("c")
	step("start member c", err)
	members = append(members, c)
	_, err = waitFor("c consumed phase 4", 60*time.Second, func() bool { return total() >= 4*all*perPart })
	step("phase 4", err)
	time.Sleep(1500 * time.Millisecond)
	step("member c leaves", c.stop())
	for _, m := range members {
		out[m.name] = m.report()
	}
	_ = prod.Close()
	emit(out)
}
