// Command client submits a job to the httpapi example over the signed
// API, reads it back, and lists the dead emails:
//
//	AX_URL=http://127.0.0.1:8080/ax AX_KEY_ID=demo AX_SECRET=... go run ./examples/httpapi/client
package main

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"

	"github.com/axsched/ax/axhttp"
)

func main() {
	base := os.Getenv("AX_URL")
	if base == "" {
		base = "http://127.0.0.1:8080/ax"
	}
	signer := axhttp.Signer{KeyID: os.Getenv("AX_KEY_ID"), Secret: []byte(os.Getenv("AX_SECRET"))}
	if signer.KeyID == "" {
		signer.KeyID = "demo"
	}
	client := &http.Client{Timeout: 10 * time.Second}
	for _, r := range []struct{ method, path, body string }{
		{"POST", "/api/v1/jobs", `{"kind":"email","payload":{"to":"ada@example.com","subject":"hi"},"unique_key":"welcome-ada"}`},
		{"POST", "/api/v1/jobs", `{"kind":"email","payload":{"to":"bob@example.invalid"}}`},
		{"GET", "/api/v1/jobs?kind=email&state=dead,retrying&limit=10", ""},
	} {
		status, body, err := do(client, signer, r.method, base+r.path, r.body)
		if err != nil {
			fmt.Fprintln(os.Stderr, "client:", err)
			os.Exit(1)
		}
		fmt.Printf("%s %s -> %d\n%s\n", r.method, r.path, status, body)
	}
}

// do sends one signed request and returns the status and body.
func do(c *http.Client, s axhttp.Signer, method, url, body string) (int, string, error) {
	var rd io.Reader
	if body != "" {
		rd = bytes.NewBufferString(body)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		return 0, "", err
	}
	req.Header.Set("Content-Type", "application/json")
	if err := s.Sign(req); err != nil { // sets X-AX-Key, -Timestamp, -Nonce, -Signature
		return 0, "", err
	}
	res, err := c.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	return res.StatusCode, string(b), err
}
