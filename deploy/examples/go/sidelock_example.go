// sidelock from Go, standard library only.
//
//	go run sidelock_example.go acquire [NAME]   wait for a lock (retrying safely with a request_id),
//	                                            pass its fencing token on, release it
//	go run sidelock_example.go stream [NAME]    hold a lock for as long as a connection stays open,
//	                                            and stop working the moment the sidecar says "lost"
//
// Environment: SIDELOCK_URL (default http://127.0.0.1:7411), SIDELOCK_AUTH_TOKEN (when the sidecar
// has bearer tokens), SIDELOCK_WORK_MS (how long the stream example works, default 3000).
package main

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"
)

var sidecar = strings.TrimSuffix(envOr("SIDELOCK_URL", "http://127.0.0.1:7411"), "/")

func envOr(key, fallback string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return fallback
}

// Grant is the answer to a granted acquire. Tokens fit in int64 (and below 2^53).
type Grant struct {
	Name  string `json:"name"`
	Owner string `json:"owner"`
	Token int64  `json:"token"`
	TTLMs int64  `json:"ttl_ms"`
}

// Answer holds the fields of any other answer this example looks at.
type Answer struct {
	Error        string `json:"error"`
	Message      string `json:"message"`
	RetryAfterMs *int64 `json:"retry_after_ms"`
}

func newRequest(method, path string, body any) (*http.Request, error) {
	data, err := json.Marshal(body)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequest(method, sidecar+path, bytes.NewReader(data))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	if token := os.Getenv("SIDELOCK_AUTH_TOKEN"); token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	return req, nil
}

// call sends one request and decodes the answer into out (on 200) or an Answer. The error is
// non-nil when no answer came (connection refused, reset, timed out).
func call(client *http.Client, method, path string, body any, out any) (int, Answer, error) {
	req, err := newRequest(method, path, body)
	if err != nil {
		return 0, Answer{}, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, Answer{}, err
	}
	defer resp.Body.Close()
	var answer Answer
	if resp.StatusCode == http.StatusOK && out != nil {
		err = json.NewDecoder(resp.Body).Decode(out)
	} else {
		err = json.NewDecoder(resp.Body).Decode(&answer)
	}
	return resp.StatusCode, answer, err
}

func requestID() string {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b)
}

// acquire waits up to waitMs for the lock (nil: somebody else held it all along). A request that
// got no answer may still have been granted, so it is sent again with the same request_id: the
// sidecar then answers with the grant it already made instead of making a second one (or finding
// the lock held by us).
func acquire(name string, ttlMs, waitMs int64) (*Grant, error) {
	body := map[string]any{"ttl_ms": ttlMs, "wait_ms": waitMs, "request_id": requestID()}
	// The sidecar answers within wait_ms; give it a little more before calling it lost.
	client := &http.Client{Timeout: time.Duration(waitMs)*time.Millisecond + 5*time.Second}
	for attempt := int64(1); attempt <= 8; attempt++ {
		var grant Grant
		status, answer, err := call(client, "POST", "/v1/locks/"+name+"/acquire", body, &grant)
		switch {
		case err == nil && status == http.StatusOK:
			return &grant, nil
		case err == nil && status == http.StatusConflict:
			return nil, nil
		case err == nil && status != http.StatusTooManyRequests && status != http.StatusServiceUnavailable:
			return nil, fmt.Errorf("acquire refused: %d %s: %s", status, answer.Error, answer.Message)
		}
		// No answer, a queue limit (429) or the backend down (503): try again, same request_id.
		delayMs := 200 * attempt
		if answer.RetryAfterMs != nil {
			delayMs = *answer.RetryAfterMs
		}
		why := answer.Error
		if err != nil {
			why = err.Error()
		}
		fmt.Printf("attempt %d: %s; retrying in %.1fs with the same request_id\n", attempt, why, float64(delayMs)/1000)
		time.Sleep(time.Duration(delayMs) * time.Millisecond)
	}
	return nil, fmt.Errorf("no answer from the sidecar at %s", sidecar)
}

// FencedStore stands in for the resource the lock protects (a database row, a file on shared
// storage): it remembers the highest fencing token it has seen and refuses writes with a lower
// one, so a holder that was paused past its TTL cannot overwrite the work of the next holder.
// In SQL: UPDATE ... SET fence = :token WHERE id = :id AND fence <= :token.
type FencedStore struct {
	fence int64
	value string
}

func (s *FencedStore) Write(token int64, value string) bool {
	if token < s.fence {
		return false
	}
	s.fence, s.value = token, value
	return true
}

func acquireExample(name string) int {
	grant, err := acquire(name, 10000, 30000)
	if err != nil {
		fmt.Println(err)
		return 69
	}
	if grant == nil {
		fmt.Printf("%s is busy; try later\n", name)
		return 75
	}
	fmt.Printf("acquired %s token=%d\n", name, grant.Token)
	var store FencedStore
	if store.Write(grant.Token, "report of "+time.Now().Format("2006-01-02")) {
		fmt.Printf("stored with fence token %d\n", grant.Token)
	}
	if !store.Write(grant.Token-1, "a late write") {
		fmt.Printf("a stale writer with token %d is refused\n", grant.Token-1)
	}
	status, answer, err := call(http.DefaultClient, "POST", "/v1/locks/"+name+"/release",
		map[string]string{"owner": grant.Owner}, nil)
	if err == nil && status == http.StatusOK {
		fmt.Printf("released %s\n", name)
	} else {
		fmt.Printf("release: %d %s %v\n", status, answer.Error, err)
	}
	return 0
}

// StreamEvent is one line of a stream hold's answer.
type StreamEvent struct {
	Event  string `json:"event"`
	Token  int64  `json:"token"`
	Reason string `json:"reason"`
}

func streamExample(name string) int {
	workMs, _ := strconv.Atoi(envOr("SIDELOCK_WORK_MS", "3000"))
	req, err := newRequest("POST", "/v1/locks/"+name+"/acquire",
		map[string]any{"ttl_ms": 5000, "wait_ms": 30000, "hold": "stream"})
	if err != nil {
		fmt.Println(err)
		return 70
	}
	resp, err := http.DefaultClient.Do(req) // no client timeout: the answer lasts as long as the hold
	if err != nil {
		fmt.Println(err)
		return 69
	}
	defer resp.Body.Close() // closing the connection releases the lock at once
	if resp.StatusCode != http.StatusOK {
		var answer Answer
		_ = json.NewDecoder(resp.Body).Decode(&answer)
		fmt.Printf("not acquired: %d %s\n", resp.StatusCode, answer.Error)
		return 75
	}
	// The answer is one JSON object per line: "acquired" first, then what happens to the lease.
	lines := bufio.NewScanner(resp.Body)
	var first StreamEvent
	if !lines.Scan() || json.Unmarshal(lines.Bytes(), &first) != nil {
		fmt.Println("no acquired event")
		return 70
	}
	fmt.Printf("holding %s token=%d\n", name, first.Token)
	lost := make(chan string, 1)
	go func() {
		for lines.Scan() {
			var event StreamEvent
			if json.Unmarshal(lines.Bytes(), &event) == nil && (event.Event == "lost" || event.Event == "released") {
				if event.Reason == "" {
					event.Reason = event.Event
				}
				lost <- event.Reason
				return
			}
		}
		lost <- "the stream ended"
	}()

	done := time.After(time.Duration(workMs) * time.Millisecond)
	step := time.NewTicker(100 * time.Millisecond) // one step of work, checking between steps
	defer step.Stop()
	for {
		select {
		case why := <-lost:
			fmt.Printf("lost %s: %s; stopping work\n", name, why)
			return 76
		case <-done:
			resp.Body.Close()
			fmt.Printf("done; closing the stream released %s\n", name)
			return 0
		case <-step.C:
		}
	}
}

func main() {
	mode, name := "acquire", ""
	if len(os.Args) > 1 {
		mode = os.Args[1]
	}
	if len(os.Args) > 2 {
		name = os.Args[2]
	}
	switch mode {
	case "acquire":
		os.Exit(acquireExample(orDefault(name, "orders-42")))
	case "stream":
		os.Exit(streamExample(orDefault(name, "nightly-report")))
	default:
		fmt.Println("usage: go run sidelock_example.go acquire|stream [NAME]")
		os.Exit(64)
	}
}

func orDefault(name, fallback string) string {
	if name != "" {
		return name
	}
	return fallback
}
