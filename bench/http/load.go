// Command load drives a sample payments app (tests/http) with POST /payments from C keep-alive clients for a
// fixed time and prints one JSON line: requests per second and the count of each status.
//
//	load -url http://127.0.0.1:PORT -clients 8 -seconds 5 -keys new|replay -prefix P [-replay-keys 200]
//
// -keys new sends a key never used before on every request; -keys replay cycles through -replay-keys keys that
// it first sends once each (not timed), so every timed request is a replay. The body and tenant never change.
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

var body = []byte(`{"amount": 1000, "currency": "EUR", "customer_id": "cus_bench"}`)

func post(client *http.Client, url, key string) (int, error) {
	req, err := http.NewRequest(http.MethodPost, url+"/payments", bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer bench")
	req.Header.Set("Idempotency-Key", key)
	resp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	io.Copy(io.Discard, resp.Body) // read to the end so the connection is reused
	resp.Body.Close()
	return resp.StatusCode, nil
}

func main() {
	url := flag.String("url", "", "the app's base URL")
	clients := flag.Int("clients", 1, "concurrent clients, one keep-alive connection each")
	seconds := flag.Float64("seconds", 5, "measured seconds")
	keys := flag.String("keys", "new", "new or replay")
	prefix := flag.String("prefix", "", "key prefix, unique per run")
	replayKeys := flag.Int("replay-keys", 200, "keys cycled through by -keys replay")
	flag.Parse()
	if *url == "" || *prefix == "" || (*keys != "new" && *keys != "replay") {
		flag.Usage()
		os.Exit(2)
	}
	transport := &http.Transport{MaxIdleConnsPerHost: *clients, MaxConnsPerHost: *clients}
	client := &http.Client{Transport: transport, Timeout: 30 * time.Second}

	if *keys == "replay" {
		for i := 0; i < *replayKeys; i++ {
			if status, err := post(client, *url, fmt.Sprintf("%s-%d", *prefix, i)); err != nil || status >= 300 {
				fmt.Fprintf(os.Stderr, "load: setting up replay key %d: status %d, %v\n", i, status, err)
				os.Exit(1)
			}
		}
	}

	var (
		next     int64
		mu       sync.Mutex
		statuses = map[string]int{}
		wg       sync.WaitGroup
	)
	deadline := time.Now().Add(time.Duration(*seconds * float64(time.Second)))
	start := time.Now()
	for c := 0; c < *clients; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			seen := map[string]int{}
			for time.Now().Before(deadline) {
				n := atomic.AddInt64(&next, 1)
				key := fmt.Sprintf("%s-n%d", *prefix, n)
				if *keys == "replay" {
					key = fmt.Sprintf("%s-%d", *prefix, n%int64(*replayKeys))
				}
				status, err := post(client, *url, key)
				if err != nil {
					seen["error"]++
					continue
				}
				seen[fmt.Sprint(status)]++
			}
			mu.Lock()
			for k, v := range seen {
				statuses[k] += v
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	elapsed := time.Since(start).Seconds()
	done := 0
	for _, v := range statuses {
		done += v
	}
	out, _ := json.Marshal(map[string]interface{}{"rps": float64(done) / elapsed, "statuses": statuses})
	fmt.Println(string(out))
}
