package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/jmcluster/jmcluster/membership"
	"github.com/jmcluster/jmcluster/transport/pb"
)

const gossipUsage = `usage: jmnode gossip <keygen | keyring list|install|use|remove> [flags]

The gossip pool's encryption keys (docs/security.md):

  jmnode gossip keygen                 print a new random 32-byte key (for --gossip-key)
  jmnode gossip keyring list           every live member's keys, as fingerprints
  jmnode gossip keyring install KEY    add KEY on every live member (they decrypt with it)
  jmnode gossip keyring use KEY        encrypt with KEY on every live member
  jmnode gossip keyring remove KEY     drop KEY, no longer the primary, on every live member

A rotation is install, use, remove the old key: each step is done on every live member by the
JobMaster --addr names. Use is refused while a member lacks the key, remove while a member
still encrypts with it, so no member ever stops reading another. Each member keeps its keyring
in its keyring file (--gossip-keyring) across restarts. KEY is base64; --key-file reads it from
a file instead of the command line.
`

// runGossipKeygen prints a new gossip key.
func runGossipKeygen(args []string) error {
	if len(args) > 0 && isHelp(args[0]) {
		fmt.Println("usage: jmnode gossip keygen\n\nPrints a new random 32-byte (AES-256) gossip key, base64 encoded.")
		return nil
	}
	if len(args) > 0 {
		return fmt.Errorf("gossip keygen takes no arguments")
	}
	k, err := membership.NewKey()
	if err != nil {
		return err
	}
	fmt.Println(k)
	return nil
}

var keyringOps = map[string]pb.KeyringOp{
	"list":    pb.KeyringOp_KEYRING_OP_LIST,
	"install": pb.KeyringOp_KEYRING_OP_INSTALL,
	"use":     pb.KeyringOp_KEYRING_OP_USE,
	"remove":  pb.KeyringOp_KEYRING_OP_REMOVE,
}

var keyringHelp = map[string]string{
	"install": "Adds KEY (base64) to the keyring of every live member: they decrypt gossip encrypted with it.\nThe first step of a rotation; then 'use', then 'remove' the old key.",
	"use":     "Makes KEY the primary of every live member: they encrypt gossip with it. Refused, nothing\nchanged, while a live member has not installed it.",
	"remove":  "Drops KEY from the keyring of every live member. Refused, nothing changed, while a live member\nstill encrypts with it. A member down during the rotation needs the new key to rejoin.",
}

// runKeyring runs `jmnode gossip keyring SUB` with the arguments after SUB.
func runKeyring(sub string, rest []string) error {
	op, ok := keyringOps[sub]
	if !ok {
		return fmt.Errorf("gossip keyring: unknown command %q (list, install, use, remove)", sub)
	}
	fs := flag.NewFlagSet("gossip keyring "+sub, flag.ContinueOnError)
	cf := newCLIFlags(fs, true)
	var keyFile *string
	if op == pb.KeyringOp_KEYRING_OP_LIST {
		usageFor(fs, "jmnode gossip keyring list [--json]", "Lists every live member's gossip keys as fingerprints (sha256:...), the primary marked.")
	} else {
		usageFor(fs, "jmnode gossip keyring "+sub+" KEY | --key-file FILE", keyringHelp[sub])
		keyFile = fs.String("key-file", "", "read the base64 key from this file instead of the command line")
	}
	if err := parseFlags(fs, reorder(fs, rest)); err != nil {
		return err
	}
	req := &pb.KeyringRequest{Op: op}
	if keyFile != nil {
		text := fs.Arg(0)
		switch {
		case *keyFile != "" && fs.NArg() > 0:
			return errors.New("give KEY or --key-file, not both")
		case *keyFile != "":
			b, err := os.ReadFile(*keyFile)
			if err != nil {
				return err
			}
			text = string(b)
		case fs.NArg() != 1:
			fs.Usage()
			return fmt.Errorf("gossip keyring %s needs KEY (base64) or --key-file", sub)
		}
		k, err := membership.ParseKey(text)
		if err != nil {
			return err
		}
		req.Key = k
	}
	resp, err := ask(cf, func(ctx context.Context, c *conn) (*pb.GossipKeyringResponse, error) {
		return c.operator().GossipKeyring(ctx, req)
	})
	if err != nil {
		return err
	}
	if *cf.json {
		if err := printJSON(resp); err != nil {
			return err
		}
	} else if err := printKeyrings(resp, op); err != nil {
		return err
	}
	if resp.Failed > 0 {
		return fmt.Errorf("gossip keyring %s: %d of %d members failed (see ERROR); run it again once they are reachable", sub, resp.Failed, len(resp.Members))
	}
	return nil
}

func printKeyrings(resp *pb.GossipKeyringResponse, op pb.KeyringOp) error {
	w := tabwriter.NewWriter(os.Stdout, 0, 2, 2, ' ', 0)
	fmt.Fprintln(w, "MEMBER\tROLE\tPRIMARY\tKEYS\tERROR")
	for _, m := range resp.Members {
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", m.Name, m.Role, orDash(m.Primary), orDash(strings.Join(m.Keys, ",")), orDash(m.Error))
	}
	if err := w.Flush(); err != nil {
		return err
	}
	if op == pb.KeyringOp_KEYRING_OP_LIST {
		counts := map[string]int{}
		var order []string
		for _, m := range resp.Members {
			for _, k := range m.Keys {
				if counts[k] == 0 {
					order = append(order, k)
				}
				counts[k]++
			}
		}
		for _, k := range order {
			fmt.Printf("key %s: on %d of %d members\n", k, counts[k], len(resp.Members))
		}
	}
	return nil
}
