package endpoints

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
)

// ErrNoSecretsKey: PAYSVC_SECRETS_KEY is not set, so no secret can be
// sealed (created, rotated) or opened (signed with).
var ErrNoSecretsKey = errors.New("PAYSVC_SECRETS_KEY is not set: endpoint secrets cannot be created or used")

// ErrSealedElsewhere: a sealed secret does not open under any key given
// (sealed under a key that is no longer configured, or altered).
var ErrSealedElsewhere = errors.New("secret sealed under a key that is not configured")

// KeyID names a secrets key in webhook_endpoint_secrets.key_id: the first
// 8 bytes of its SHA-256.
type KeyID [8]byte

// Keyring seals endpoint secrets with AES-256-GCM under the current key
// and opens them under the current or the old one (during a rewrap).
// The zero Keyring has no key: Seal and Open fail with ErrNoSecretsKey.
type Keyring struct {
	current *sealer
	old     *sealer
}

type sealer struct {
	id   KeyID
	aead cipher.AEAD
}

func newSealer(key []byte) (*sealer, error) {
	if len(key) != 32 {
		return nil, fmt.Errorf("must be base64 of 32 bytes, got %d bytes", len(key))
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(key)
	s := &sealer{aead: aead}
	copy(s.id[:], sum[:8])
	return s, nil
}

// NewKeyring returns the keyring of current (nil: no key) and old (nil:
// none).
func NewKeyring(current, old []byte) (*Keyring, error) {
	k := &Keyring{}
	var err error
	if current != nil {
		if k.current, err = newSealer(current); err != nil {
			return nil, fmt.Errorf("PAYSVC_SECRETS_KEY: %w", err)
		}
	}
	if old != nil {
		if k.old, err = newSealer(old); err != nil {
			return nil, fmt.Errorf("PAYSVC_SECRETS_KEY_OLD: %w", err)
		}
	}
	return k, nil
}

// Ready reports whether secrets can be sealed.
func (k *Keyring) Ready() bool { return k != nil && k.current != nil }

// aad binds a sealed secret to its row.
func aad(endpointID, secretID string) []byte { return []byte(endpointID + "/" + secretID) }

// Seal encrypts a secret's key for its row under the current key.
func (k *Keyring) Seal(endpointID, secretID string, plain []byte) (KeyID, []byte, error) {
	if !k.Ready() {
		return KeyID{}, nil, ErrNoSecretsKey
	}
	nonce := make([]byte, k.current.aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return KeyID{}, nil, err
	}
	return k.current.id, k.current.aead.Seal(nonce, nonce, plain, aad(endpointID, secretID)), nil
}

// Open decrypts a sealed secret under the key that sealed it.
func (k *Keyring) Open(endpointID, secretID string, id KeyID, sealed []byte) ([]byte, error) {
	if !k.Ready() {
		return nil, ErrNoSecretsKey
	}
	for _, s := range []*sealer{k.current, k.old} {
		if s == nil || s.id != id {
			continue
		}
		n := s.aead.NonceSize()
		if len(sealed) < n {
			return nil, ErrSealedElsewhere
		}
		plain, err := s.aead.Open(nil, sealed[:n], sealed[n:], aad(endpointID, secretID))
		if err != nil {
			return nil, ErrSealedElsewhere
		}
		return plain, nil
	}
	return nil, ErrSealedElsewhere
}

// CurrentID is the current key's id; OldID the old key's (ok false when
// there is none).
func (k *Keyring) CurrentID() KeyID { return k.current.id }

// OldID is the old key's id; ok is false when no old key is configured.
func (k *Keyring) OldID() (KeyID, bool) {
	if k == nil || k.old == nil {
		return KeyID{}, false
	}
	return k.old.id, true
}
