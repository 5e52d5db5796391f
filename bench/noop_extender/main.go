// A no-op kube-scheduler extender: the floor against which bench/scheduling_throughput.py measures
// spot-extender. It answers /filter with every node it was given and /prioritize with score 0 for each,
// over HTTPS with keep-alive (Go's net/http), for nodeCacheCapable (NodeNames) and full-Node requests alike.
// Standard library only: it builds with the machine's Go (as the control plane does) and fetches nothing.
package main

import (
	"encoding/json"
	"flag"
	"log"
	"net/http"
)

// args is the part of k8s.io/kube-scheduler/extender/v1 ExtenderArgs this extender reads.
type args struct {
	Nodes *struct {
		Items []struct {
			Metadata struct {
				Name string `json:"name"`
			} `json:"metadata"`
		} `json:"items"`
	} `json:"nodes"`
	NodeNames *[]string `json:"nodenames"`
}

func (a *args) names() []string {
	if a.NodeNames != nil {
		return *a.NodeNames
	}
	var names []string
	if a.Nodes != nil {
		for _, n := range a.Nodes.Items {
			names = append(names, n.Metadata.Name)
		}
	}
	return names
}

type hostPriority struct {
	Host  string `json:"host"`
	Score int64  `json:"score"`
}

func decode(w http.ResponseWriter, r *http.Request) (*args, bool) {
	var a args
	if err := json.NewDecoder(r.Body).Decode(&a); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return nil, false
	}
	return &a, true
}

func reply(w http.ResponseWriter, v interface{}) {
	w.Header().Set("Content-Type", "application/json")
	if err := json.NewEncoder(w).Encode(v); err != nil {
		log.Printf("writing an answer: %v", err)
	}
}

func main() {
	addr := flag.String("addr", "127.0.0.1:0", "listen address")
	cert := flag.String("cert", "", "TLS certificate (PEM)")
	key := flag.String("key", "", "TLS key (PEM)")
	flag.Parse()

	http.HandleFunc("/filter", func(w http.ResponseWriter, r *http.Request) {
		a, ok := decode(w, r)
		if !ok {
			return
		}
		// ExtenderFilterResult: the nodes given, none failed. Nodes stays null for NodeNames requests.
		result := map[string]interface{}{"nodes": a.Nodes, "nodenames": a.NodeNames, "failedNodes": map[string]string{}, "error": ""}
		reply(w, result)
	})
	http.HandleFunc("/prioritize", func(w http.ResponseWriter, r *http.Request) {
		a, ok := decode(w, r)
		if !ok {
			return
		}
		names := a.names()
		scores := make([]hostPriority, len(names))
		for i, n := range names {
			scores[i] = hostPriority{Host: n}
		}
		reply(w, scores)
	})
	http.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok")) })
	log.Fatal(http.ListenAndServeTLS(*addr, *cert, *key, nil))
}
