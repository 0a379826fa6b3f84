package integration

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
)

// A fake model API for driving the real agents (Claude Code, Codex CLI)
// offline: a small HTTP server on a test host in a network namespace the
// test creates, speaking just enough of Anthropic's Messages API and
// OpenAI's Responses API (both streamed as server-sent events) to answer a
// prompt with one tool call that writes a file, then, once the tool's
// result comes back, with a final text. It also answers DNS (NXDOMAIN for
// every name, each query logged), so the sandbox's resolver is the test
// host and no name the agents look up leaves the machine.

const fakeModelEnv = "LAZARET_IT_FAKEMODEL"

// fakeModelPlan is what the fake model does, passed to the server as JSON.
type fakeModelPlan struct {
	Addr    string `json:"addr"`    // IPv4 address to listen on (HTTP :8080, DNS :53)
	File    string `json:"file"`    // the guest path the tool call writes
	Content string `json:"content"` // what it writes
	Final   string `json:"final"`   // the final text, after the tool result
	CallID  string `json:"call_id"` // the tool call's id
	Bodies  string `json:"bodies"`  // directory for each request's full body
}

// fakeRequest is the server's record of one request, one JSON line on its
// stdout.
type fakeRequest struct {
	Seq      int      `json:"seq"`
	Kind     string   `json:"kind"` // http or dns
	Method   string   `json:"method,omitempty"`
	Path     string   `json:"path,omitempty"`
	APIKey   string   `json:"api_key,omitempty"` // x-api-key, or the bearer token of Authorization
	Model    string   `json:"model,omitempty"`
	Stream   bool     `json:"stream,omitempty"`
	Tools    []string `json:"tools,omitempty"`
	Headers  []string `json:"headers,omitempty"`  // the names of the request's headers, and some values
	Answer   string   `json:"answer"`             // what the server answered: tool_call, final, aux, count_tokens, unexpected, nxdomain
	Result   string   `json:"result,omitempty"`   // the tool result the agent sent back
	Question string   `json:"question,omitempty"` // the DNS name
	BodyFile string   `json:"body_file,omitempty"`
}

func (r fakeRequest) String() string {
	if r.Kind == "dns" {
		return fmt.Sprintf("#%d dns %s -> %s", r.Seq, r.Question, r.Answer)
	}
	s := fmt.Sprintf("#%d %s %s model=%q stream=%v tools=%v -> %s", r.Seq, r.Method, r.Path, r.Model, r.Stream, r.Tools, r.Answer)
	if r.Result != "" {
		s += fmt.Sprintf(" (tool result %q)", r.Result)
	}
	return s + fmt.Sprintf("\n    headers %q", r.Headers)
}

// runFakeModel is the test host's server (TestMain runs it inside the test
// network namespace when fakeModelEnv is set).
func runFakeModel(cfg string) {
	var plan fakeModelPlan
	if err := json.Unmarshal([]byte(cfg), &plan); err != nil {
		fmt.Fprintln(os.Stderr, "fake model plan:", err)
		os.Exit(1)
	}
	s := &fakeModel{plan: plan}
	l, err := net.Listen("tcp4", plan.Addr+":8080")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	d, err := net.ListenPacket("udp4", plan.Addr+":53")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	go serveDNS(d, map[string]string{}, func(q string) {
		s.record(fakeRequest{Kind: "dns", Question: q, Answer: "nxdomain"})
	})
	fmt.Println("ready")
	http.Serve(l, s)
	os.Exit(1)
}

type fakeModel struct {
	plan fakeModelPlan
	mu   sync.Mutex
	seq  int
}

func (s *fakeModel) record(r fakeRequest) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seq++
	r.Seq = s.seq
	b, _ := json.Marshal(r)
	fmt.Println(string(b))
}

// contentBlock is a Messages API content block or a Responses API input
// item: the fields the server looks at.
type contentBlock struct {
	Type      string          `json:"type"`
	ToolUseID string          `json:"tool_use_id"`
	CallID    string          `json:"call_id"`
	Content   json.RawMessage `json:"content"`
	Output    json.RawMessage `json:"output"`
}

type fakeBody struct {
	Model    string `json:"model"`
	Stream   bool   `json:"stream"`
	Messages []struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	} `json:"messages"`
	Input json.RawMessage `json:"input"`
	Tools []struct {
		Name     string `json:"name"`
		Type     string `json:"type"`
		Function struct {
			Name string `json:"name"`
		} `json:"function"`
	} `json:"tools"`
}

func (b *fakeBody) toolNames() []string {
	var names []string
	for _, t := range b.Tools {
		n := t.Name
		if n == "" {
			n = t.Function.Name
		}
		if n == "" {
			n = "(" + t.Type + ")"
		}
		names = append(names, n)
	}
	return names
}

// text renders a tool result's content (a string or blocks) as text.
func text(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var blocks []struct {
		Text string `json:"text"`
	}
	if json.Unmarshal(raw, &blocks) == nil {
		var parts []string
		for _, b := range blocks {
			parts = append(parts, b.Text)
		}
		return strings.Join(parts, "")
	}
	return string(raw)
}

func (s *fakeModel) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	rec := fakeRequest{Kind: "http", Method: req.Method, Path: req.URL.Path, APIKey: req.Header.Get("X-Api-Key")}
	if a := req.Header.Get("Authorization"); strings.HasPrefix(a, "Bearer ") {
		rec.APIKey = strings.TrimPrefix(a, "Bearer ")
	}
	var b fakeBody
	json.Unmarshal(body, &b)
	rec.Model, rec.Stream, rec.Tools = b.Model, b.Stream, b.toolNames()
	for k := range req.Header {
		switch k {
		case "User-Agent", "Anthropic-Version", "Anthropic-Beta", "Originator", "Openai-Beta", "X-App":
			k += ": " + req.Header.Get(k)
		}
		rec.Headers = append(rec.Headers, k)
	}
	sort.Strings(rec.Headers)
	if s.plan.Bodies != "" && len(body) > 0 {
		s.mu.Lock()
		rec.BodyFile = filepath.Join(s.plan.Bodies, fmt.Sprintf("%02d%s.json", s.seq+1, strings.ReplaceAll(req.URL.Path, "/", "_")))
		s.mu.Unlock()
		os.WriteFile(rec.BodyFile, body, 0o644)
	}
	defer func() { s.record(rec) }()
	switch {
	case req.Method == "POST" && req.URL.Path == "/v1/messages/count_tokens":
		rec.Answer = "count_tokens"
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"input_tokens":100}`)
	case req.Method == "POST" && req.URL.Path == "/v1/messages":
		s.messages(w, &b, &rec)
	case req.Method == "POST" && req.URL.Path == "/v1/responses":
		s.responses(w, &b, &rec)
	default:
		rec.Answer = "unexpected"
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		io.WriteString(w, `{"type":"error","error":{"type":"not_found_error","message":"the fake model API does not serve this"}}`)
	}
}

// sse writes server-sent events (name, JSON data) and flushes.
func sse(w http.ResponseWriter, events ...any) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	for i := 0; i+1 < len(events); i += 2 {
		data, _ := json.Marshal(events[i+1])
		fmt.Fprintf(w, "event: %s\ndata: %s\n\n", events[i], data)
	}
	if f, ok := w.(http.Flusher); ok {
		f.Flush()
	}
}

type obj = map[string]any

// messages answers Anthropic's POST /v1/messages: the tool result of our
// call gets the final text; a request offering the Write tool gets the
// tool call; any other (a side request without tools: a title, a quota
// probe) a short text.
func (s *fakeModel) messages(w http.ResponseWriter, b *fakeBody, rec *fakeRequest) {
	for _, m := range b.Messages {
		var blocks []contentBlock
		if json.Unmarshal(m.Content, &blocks) != nil {
			continue
		}
		for _, c := range blocks {
			if c.Type == "tool_result" && c.ToolUseID == s.plan.CallID {
				rec.Result = text(c.Content)
			}
		}
	}
	var content []obj
	stop := "end_turn"
	switch {
	case rec.Result != "":
		rec.Answer = "final"
		content = []obj{{"type": "text", "text": s.plan.Final}}
	case contains(rec.Tools, "Write"):
		rec.Answer = "tool_call"
		stop = "tool_use"
		content = []obj{{"type": "tool_use", "id": s.plan.CallID, "name": "Write", "input": obj{"file_path": s.plan.File, "content": s.plan.Content}}}
	default:
		rec.Answer = "aux"
		content = []obj{{"type": "text", "text": "ok"}}
	}
	model := b.Model
	if model == "" {
		model = "fake-model"
	}
	usage := obj{"input_tokens": 10, "output_tokens": 5, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}
	if !b.Stream {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(obj{"id": "msg_fake_" + rec.Answer, "type": "message", "role": "assistant", "model": model,
			"content": content, "stop_reason": stop, "stop_sequence": nil, "usage": usage})
		return
	}
	ev := []any{"message_start", obj{"type": "message_start", "message": obj{"id": "msg_fake_" + rec.Answer, "type": "message", "role": "assistant",
		"model": model, "content": []obj{}, "stop_reason": nil, "stop_sequence": nil, "usage": usage}}}
	for i, c := range content {
		if c["type"] == "tool_use" {
			input, _ := json.Marshal(c["input"])
			ev = append(ev,
				"content_block_start", obj{"type": "content_block_start", "index": i, "content_block": obj{"type": "tool_use", "id": c["id"], "name": c["name"], "input": obj{}}},
				"content_block_delta", obj{"type": "content_block_delta", "index": i, "delta": obj{"type": "input_json_delta", "partial_json": string(input)}})
		} else {
			ev = append(ev,
				"content_block_start", obj{"type": "content_block_start", "index": i, "content_block": obj{"type": "text", "text": ""}},
				"content_block_delta", obj{"type": "content_block_delta", "index": i, "delta": obj{"type": "text_delta", "text": c["text"]}})
		}
		ev = append(ev, "content_block_stop", obj{"type": "content_block_stop", "index": i})
	}
	ev = append(ev,
		"message_delta", obj{"type": "message_delta", "delta": obj{"stop_reason": stop, "stop_sequence": nil}, "usage": obj{"output_tokens": 5}},
		"message_stop", obj{"type": "message_stop"})
	sse(w, ev...)
}

// responses answers OpenAI's POST /v1/responses (streamed): the output of
// our call gets the final message; a request offering a tool that can
// write the file gets a call of it.
func (s *fakeModel) responses(w http.ResponseWriter, b *fakeBody, rec *fakeRequest) {
	var items []contentBlock
	json.Unmarshal(b.Input, &items)
	for _, it := range items {
		if (it.Type == "function_call_output" || it.Type == "custom_tool_call_output") && it.CallID == s.plan.CallID {
			rec.Result = text(it.Output)
			if rec.Result == "" {
				rec.Result = "(empty)"
			}
		}
	}
	var item obj
	script := fmt.Sprintf("printf '%%s' '%s' > '%s'", s.plan.Content, s.plan.File)
	args := func(v obj) string { b, _ := json.Marshal(v); return string(b) }
	switch {
	case rec.Result != "":
		rec.Answer = "final"
		item = obj{"type": "message", "id": "msg_fake_final", "role": "assistant", "status": "completed",
			"content": []obj{{"type": "output_text", "text": s.plan.Final, "annotations": []any{}}}}
	case contains(rec.Tools, "shell"):
		rec.Answer = "tool_call shell"
		item = obj{"type": "function_call", "id": "fc_fake", "call_id": s.plan.CallID, "name": "shell", "status": "completed",
			"arguments": args(obj{"command": []string{"bash", "-lc", script}, "workdir": "/workspace"})}
	case contains(rec.Tools, "shell_command"):
		rec.Answer = "tool_call shell_command"
		item = obj{"type": "function_call", "id": "fc_fake", "call_id": s.plan.CallID, "name": "shell_command", "status": "completed",
			"arguments": args(obj{"command": script, "workdir": "/workspace"})}
	case contains(rec.Tools, "exec_command"):
		rec.Answer = "tool_call exec_command"
		item = obj{"type": "function_call", "id": "fc_fake", "call_id": s.plan.CallID, "name": "exec_command", "status": "completed",
			"arguments": args(obj{"cmd": script, "workdir": "/workspace"})}
	default:
		rec.Answer = "unexpected"
		w.WriteHeader(http.StatusBadRequest)
		io.WriteString(w, `{"error":{"message":"the fake model found no shell tool in the request","type":"invalid_request_error"}}`)
		return
	}
	resp := obj{"id": "resp_fake", "object": "response", "status": "in_progress", "model": b.Model, "output": []any{}}
	done := obj{"id": "resp_fake", "object": "response", "status": "completed", "model": b.Model, "output": []any{item},
		"usage": obj{"input_tokens": 10, "input_tokens_details": obj{"cached_tokens": 0}, "output_tokens": 5, "output_tokens_details": obj{"reasoning_tokens": 0}, "total_tokens": 15}}
	ev := []any{"response.created", obj{"type": "response.created", "response": resp},
		"response.output_item.added", obj{"type": "response.output_item.added", "output_index": 0, "item": item}}
	if item["type"] == "message" {
		ev = append(ev, "response.output_text.delta", obj{"type": "response.output_text.delta", "item_id": "msg_fake_final", "output_index": 0, "content_index": 0, "delta": s.plan.Final})
	}
	ev = append(ev,
		"response.output_item.done", obj{"type": "response.output_item.done", "output_index": 0, "item": item},
		"response.completed", obj{"type": "response.completed", "response": done})
	sse(w, ev...)
}

// fakeModelHost is a running fake model API on a test host.
type fakeModelHost struct {
	plan     fakeModelPlan
	mu       sync.Mutex
	requests []fakeRequest
	other    []string // lines that are not records (the server's complaints)
}

// startFakeModel creates a network namespace with one address, 10.81.X.2
// (X random, inside the built-in 10/8 deny, so only a profile's allow
// reaches it), and runs the fake model API there following plan.
func startFakeModel(t *testing.T, plan fakeModelPlan) *fakeModelHost {
	t.Helper()
	e := need(t)
	plan.Addr = fmt.Sprintf("10.81.%d.2", testHostOctet())
	plan.Bodies = e.userDir("fakemodel-" + randHex(3))
	h := &fakeModelHost{plan: plan}
	cfg, _ := json.Marshal(plan)
	serveOnTestHost(t, []string{plan.Addr}, fakeModelEnv, string(cfg), func(line string) {
		var r fakeRequest
		h.mu.Lock()
		defer h.mu.Unlock()
		if json.Unmarshal([]byte(line), &r) == nil && r.Kind != "" {
			h.requests = append(h.requests, r)
		} else {
			h.other = append(h.other, line)
		}
	})
	return h
}

// log renders every request the server received.
func (h *fakeModelHost) log() string {
	time.Sleep(200 * time.Millisecond) // the last lines in flight
	h.mu.Lock()
	defer h.mu.Unlock()
	var b strings.Builder
	for _, r := range h.requests {
		b.WriteString(r.String() + "\n")
	}
	for _, o := range h.other {
		b.WriteString("server: " + o + "\n")
	}
	return b.String()
}

func (h *fakeModelHost) received() []fakeRequest {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]fakeRequest(nil), h.requests...)
}

// agentCase is one agent driven by the fake model.
type agentCase struct {
	profile string
	keyVar  string // the API key's variable, passed by env_pass
	env     map[string]string
	argv    func(base, prompt string) []string
}

// TestSpec35AgentsDriveFakeModel: the built-in claude and codex profiles,
// amended by the user's configuration (an API key by env_pass, the model
// API's base URL, a network policy that reaches only the test host), run
// the real agent non-interactively against a fake model API: the model's
// one tool call writes a file that appears in the host workspace, owned by
// the developer, with the content the model chose; the tool's result
// reaches the model, whose final text the agent prints. The key reaches
// the API and nothing else: not `config show`, the Storage Root (with
// debug logging), nor the runtime directory.
func TestSpec35AgentsDriveFakeModel(t *testing.T) {
	parallel(t)
	cases := []agentCase{
		{profile: "claude", keyVar: "ANTHROPIC_API_KEY",
			env: map[string]string{"DISABLE_TELEMETRY": "1", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_ERROR_REPORTING": "1"},
			argv: func(base, prompt string) []string {
				return []string{"claude", "-p", prompt, "--permission-mode", "acceptEdits", "--allowedTools", "Write"}
			}},
		// Codex's own sandbox (bubblewrap) cannot set up the loopback of
		// its network namespace in gVisor ("bwrap: loopback: Failed
		// RTM_NEWADDR"), so its commands fail unless it runs them in the
		// whole sandbox, as the README advises.
		{profile: "codex", keyVar: "OPENAI_API_KEY",
			argv: func(base, prompt string) []string {
				return []string{"codex", "exec", "--skip-git-repo-check", "--sandbox", "danger-full-access", "--color", "never",
					"-m", "fake-model",
					"-c", `model_provider="fake"`,
					"-c", `model_providers.fake.name="fake"`,
					"-c", `model_providers.fake.base_url="` + base + `/v1"`,
					"-c", `model_providers.fake.env_key="OPENAI_API_KEY"`,
					"-c", `model_providers.fake.wire_api="responses"`,
					prompt}
			}},
	}
	for _, c := range cases {
		t.Run(c.profile, func(t *testing.T) {
			parallel(t)
			driveAgent(t, c)
		})
	}
}

func driveAgent(t *testing.T, c agentCase) {
	e := need(t)
	marker := randHex(6)
	name := "from-the-model-" + marker + ".txt"
	plan := fakeModelPlan{File: "/workspace/" + name, Content: "written by the fake model " + marker,
		Final: "FINAL-" + marker + " the fake model is done", CallID: "call_fake_" + marker}
	if c.profile == "claude" {
		plan.CallID = "toolu_fake_" + marker
	}
	h := startFakeModel(t, plan)
	plan = h.plan
	base := "http://" + plan.Addr + ":8080"
	key := "sk-fake-" + randHex(16)

	// The user's amendment of the built-in profile: the recipe (and so the
	// image) stays the built-in one.
	var b strings.Builder
	fmt.Fprintf(&b, "[profiles.%s]\nenv_pass = [%q]\n", c.profile, c.keyVar)
	fmt.Fprintf(&b, "network.allow = [\"%s/32\"]\nnetwork.deny = [\"0.0.0.0/1\", \"128.0.0.0/1\"]\nnetwork.dns = [%q]\n", plan.Addr, plan.Addr)
	envs := map[string]string{}
	for k, v := range c.env {
		envs[k] = v
	}
	if c.profile == "claude" {
		envs["ANTHROPIC_BASE_URL"] = base
	}
	keys := make([]string, 0, len(envs))
	for k := range envs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(&b, "env.%s = %q\n", k, envs[k])
	}
	cfg := filepath.Join(e.userDir("cfg-"+randHex(3)), "config.toml")
	if err := os.WriteFile(cfg, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}

	ws := workspace(t)
	// The image of the built-in profile: built by the set-up (`scripts/
	// setup.sh images USER claude codex`), else here from the npm registry
	// (the amended profile's network reaches only the test host).
	if r := lzFor(t, 20*time.Minute, ws, nil, nil, "image", "build", c.profile); r.code != 0 {
		t.Fatalf("image build %s: %d\n%s", c.profile, r.code, r.stderr)
	}
	prompt := "Create the file " + name + " in the workspace."
	hostEnv := []string{c.keyVar + "=" + key, "LAZARET_DEBUG=1"}
	args := append([]string{"run", "--config", cfg, "-p", c.profile, "--"}, c.argv(base, prompt)...)
	start := time.Now()
	r := lzFor(t, 6*time.Minute, ws, hostEnv, nil, args...)
	t.Logf("%s took %s; requests to the fake model API:\n%s", c.profile, time.Since(start), h.log())
	if r.code != 0 || !strings.Contains(r.stdout, plan.Final) {
		t.Fatalf("%s did not print the fake model's final text: exit %d\nstdout: %s\nstderr: %s\nrequests:\n%s", c.profile, r.code, r.stdout, r.stderr, h.log())
	}
	if strings.Contains(r.stderr, "building") {
		t.Errorf("the amended profile rebuilt the image:\n%s", r.stderr)
	}
	got, err := os.ReadFile(filepath.Join(ws, name))
	if err != nil || strings.TrimSpace(string(got)) != plan.Content {
		t.Fatalf("the file of the tool call on the host: %q, %v\nrequests:\n%s", got, err, h.log())
	}
	if owners := hostOwners(t, ws); owners[name] != uint32(e.uid) {
		t.Errorf("%s is owned by %d on the host, want the developer %d", name, owners[name], e.uid)
	}
	var calls, finals int
	for _, q := range h.received() {
		switch {
		case q.Kind == "dns":
		case strings.HasPrefix(q.Answer, "tool_call"):
			calls++
		case q.Answer == "final":
			finals++
		case q.Answer == "aux", q.Answer == "count_tokens":
		default:
			t.Errorf("unexpected request %s\nrequests:\n%s", q, h.log())
		}
		if q.Kind == "http" && q.APIKey != key {
			t.Errorf("request %s carried API key %q, want the env_pass value %q", q, q.APIKey, key)
		}
	}
	if calls == 0 || finals == 0 {
		t.Errorf("the agent did not go through tool call and tool result (%d calls, %d finals)\nrequests:\n%s", calls, finals, h.log())
	}
	noLeftovers(t)

	show := lzEnv(t, ws, hostEnv, nil, "config", "show", "--config", cfg, "-p", c.profile)
	showJSON := lzEnv(t, ws, hostEnv, nil, "config", "show", "--config", cfg, "-p", c.profile, "--json")
	if show.code != 0 || !strings.Contains(show.stdout, `env_pass += "`+c.keyVar+`"  # value: <secret>`) {
		t.Errorf("config show: %d\n%s%s", show.code, show.stdout, show.stderr)
	}
	for _, out := range []string{show.stdout + show.stderr, showJSON.stdout + showJSON.stderr} {
		if strings.Contains(out, key) {
			t.Errorf("config show prints the API key:\n%s", out)
		}
	}
	logs := 0
	filepath.WalkDir(e.stateHome, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.Name() == "hc.log" {
			logs++
		}
		return nil
	})
	if logs == 0 {
		t.Fatalf("no hc.log under %s: the grep below would prove nothing", e.stateHome)
	}
	if hits := grepTree(t, e.stateHome, key); len(hits) > 0 {
		t.Errorf("the API key in the Storage Root:\n%s", strings.Join(hits, "\n"))
	}
	if hits := grepTree(t, e.runtime, key); len(hits) > 0 {
		t.Errorf("the API key in the runtime directory:\n%s", strings.Join(hits, "\n"))
	}
}

func contains(list []string, s string) bool {
	for _, e := range list {
		if e == s {
			return true
		}
	}
	return false
}
