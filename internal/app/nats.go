package app

import (
	"fmt"
	"os"
	"strings"

	"github.com/nats-io/nats.go"
)

// natsToken reads the shared NATS token of a hub. The token keeps strangers
// off the embedded NATS server when it listens beyond loopback; per-cluster
// publish permissions are not enforced yet (see README, Security).
func natsToken(file string) (string, error) {
	if file == "" {
		return "", nil
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return "", fmt.Errorf("%w: --nats-token-file: %v", ErrInvalidOptions, err)
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" {
		return "", fmt.Errorf("%w: --nats-token-file %s is empty", ErrInvalidOptions, file)
	}
	return tok, nil
}

func natsTokenOption(file string) ([]nats.Option, error) {
	tok, err := natsToken(file)
	if err != nil || tok == "" {
		return nil, err
	}
	return []nats.Option{nats.Token(tok)}, nil
}
