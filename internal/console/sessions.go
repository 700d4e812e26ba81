package console

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"database/sql"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/paysvc/paysvc/internal/db"
)

// Cookie names. The session cookie holds a random token, never the key;
// the sign-in cookie exists only between the sign-in form and its POST.
const (
	SessionCookie = "paysvc_console"
	SignInCookie  = "paysvc_console_signin"
)

// CSRFField is the form field of every action's CSRF token.
const CSRFField = "csrf"

// RefusedMessage is the one answer to a refused sign-in, whatever was
// wrong with the key.
const RefusedMessage = "Sign-in refused."

// newToken is 32 random bytes, URL-safe.
func newToken() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("console token: %w", err)
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}

func tokenHash(token string) []byte {
	h := sha256.Sum256([]byte(token))
	return h[:]
}

// csrfToken is the HMAC of the purpose under the token: whoever holds the
// token (the browser, through its cookie) can be given it, and no other
// page or site can compute it, since the cookie is HttpOnly and
// SameSite=Strict.
func csrfToken(token, purpose string) string {
	m := hmac.New(sha256.New, []byte(token))
	m.Write([]byte("paysvc console " + purpose))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

func validCSRF(token, purpose, got string) bool {
	return got != "" && hmac.Equal([]byte(csrfToken(token, purpose)), []byte(got))
}

// cookie is a console cookie: HttpOnly, SameSite=Strict, scoped to the
// console, and Secure when the request came over TLS to this process. A
// forwarded-protocol header is not trusted: any client can send one.
func cookie(r *http.Request, name, value string, maxAge int) *http.Cookie {
	return &http.Cookie{Name: name, Value: value, Path: Prefix, MaxAge: maxAge, HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil}
}

// session returns the session token of r when it names a session that
// has not ended.
func (c *Console) session(r *http.Request) (string, bool, error) {
	ck, err := r.Cookie(SessionCookie)
	if err != nil || ck.Value == "" || len(ck.Value) > 64 {
		return "", false, nil
	}
	var expires time.Time
	err = db.QueryRow(r.Context(), c.db, qSession, tokenHash(ck.Value), c.now().UTC()).Scan(&expires)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return "", false, nil
	case err != nil:
		return "", false, fmt.Errorf("console session: %w", err)
	}
	return ck.Value, true, nil
}

// page wraps a page: without a session it sends the browser to sign in.
func (c *Console) page(h func(w http.ResponseWriter, r *http.Request, v *view)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		token, ok, err := c.session(r)
		if err != nil {
			c.fail(w, r, err)
			return
		}
		if !ok {
			http.Redirect(w, r, Prefix+"/signin", http.StatusSeeOther)
			return
		}
		h(w, r, &view{CSRF: csrfToken(token, "action"), Done: r.URL.Query().Get("done")})
	}
}

// action wraps an action (a POST): it runs only for a session, and only
// with that session's CSRF token; anything else is 403 and nothing is
// done.
func (c *Console) action(h func(w http.ResponseWriter, r *http.Request, token string)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		r.Body = http.MaxBytesReader(w, r.Body, 16<<10)
		token, ok, err := c.session(r)
		if err != nil {
			c.fail(w, r, err)
			return
		}
		if !ok {
			c.plain(w, http.StatusForbidden, "Not signed in.")
			return
		}
		if !validCSRF(token, "action", r.PostFormValue(CSRFField)) {
			c.plain(w, http.StatusForbidden, "The form's token is missing or wrong; reload the page and try again.")
			return
		}
		h(w, r, token)
	}
}

// signInPage shows the form, with a fresh sign-in cookie and the token
// bound to it: a sign-in POST from another site has neither (a forged
// sign-in would put the victim in the forger's session).
func (c *Console) signInPage(w http.ResponseWriter, r *http.Request) {
	c.signInForm(w, r, http.StatusOK, "")
}

func (c *Console) signInForm(w http.ResponseWriter, r *http.Request, status int, msg string) {
	pre, err := newToken()
	if err != nil {
		c.fail(w, r, err)
		return
	}
	http.SetCookie(w, cookie(r, SignInCookie, pre, int(10*time.Minute/time.Second)))
	c.render(w, r, status, "signin", &view{CSRF: csrfToken(pre, "signin"), Message: msg})
}

// signIn checks the key and opens a session. Every refusal of the key
// gets the same answer.
func (c *Console) signIn(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, 16<<10)
	pre, err := r.Cookie(SignInCookie)
	if err != nil || !validCSRF(pre.Value, "signin", r.PostFormValue(CSRFField)) {
		c.plain(w, http.StatusForbidden, "The form's token is missing or wrong; reload the sign-in page.")
		return
	}
	if !c.operatorKey(r.PostFormValue("key")) {
		c.log.WarnContext(r.Context(), "console sign-in refused", "remote", r.RemoteAddr)
		c.signInForm(w, r, http.StatusUnauthorized, RefusedMessage)
		return
	}
	token, err := newToken()
	if err != nil {
		c.fail(w, r, err)
		return
	}
	if err := c.openSession(r.Context(), token); err != nil {
		c.fail(w, r, err)
		return
	}
	c.log.InfoContext(r.Context(), "console sign-in", "remote", r.RemoteAddr)
	http.SetCookie(w, cookie(r, SignInCookie, "", -1))
	http.SetCookie(w, cookie(r, SessionCookie, token, int(SessionTTL/time.Second)))
	http.Redirect(w, r, Prefix, http.StatusSeeOther)
}

// openSession stores the token's hash, and removes a bounded batch of
// sessions that have ended, so the table holds about the live ones.
func (c *Console) openSession(ctx context.Context, token string) error {
	now := c.now().UTC().Truncate(time.Microsecond)
	if _, err := db.Exec(ctx, c.db, qSessionPurge, now, 100); err != nil {
		return fmt.Errorf("console: remove ended sessions: %w", err)
	}
	if _, err := db.Exec(ctx, c.db, qSessionInsert, tokenHash(token), now, now.Add(SessionTTL)); err != nil {
		return fmt.Errorf("console: open session: %w", err)
	}
	return nil
}

// signOut ends the session on the server, then in the browser.
func (c *Console) signOut(w http.ResponseWriter, r *http.Request, token string) {
	if _, err := db.Exec(r.Context(), c.db, qSessionDelete, tokenHash(token)); err != nil {
		c.fail(w, r, fmt.Errorf("console: end session: %w", err))
		return
	}
	http.SetCookie(w, cookie(r, SessionCookie, "", -1))
	http.Redirect(w, r, Prefix+"/signin", http.StatusSeeOther)
}
