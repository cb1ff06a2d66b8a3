// Command natsauth makes the material of NATS decentralised auth ("operator mode": JWTs
// signed by NKeys) for the tests, the way `nsc` would, with nsc's own libraries
// (github.com/nats-io/jwt/v2 and github.com/nats-io/nkeys) and nothing else:
//
//	natsauth version
//	natsauth init DIR [--accounts FILE] operator, accounts SYS (system, user sys) and APP, and
//	                                    the accounts of FILE (deploy/nats/accounts.json)
//	natsauth user DIR NAME [--account ACCOUNT] [--expires DURATION] [--permissions FILE --program KEY]
//	natsauth revoke DIR NAME            revoke user NAME in its account; prints the account's new JWT
//	natsauth nkey DIR NAME              a plain NKey user (no JWT); prints its public key
//
// Everything is written under DIR; seeds with mode 0600. stdout carries public keys and
// (revoke) the account JWT, never a seed. Bad arguments exit 2, other failures 1.
//
// DIR after init:
//
//	operator.jwt                 the operator (self-signed; accounts are signed by its signing key)
//	accounts/SYS.jwt, APP.jwt    the accounts' JWTs (APP: JetStream, no limits), and one per
//	                             account of --accounts: the owner with JetStream and the services
//	                             it exports (each to its importers only: an activation token per
//	                             import), the others without JetStream, importing them
//	keys/*.nk                    seeds: operator, operator-signing, SYS, APP, each account
//	sys.creds                    user sys of SYS (for $SYS requests: pushing account JWTs)
//	resolver.conf                nats-server config fragment: operator, system_account, the
//	                             full resolver (its store in DIR/jwt) and its preload
//	NAME.creds, NAME.nk          what `user` and `nkey` make
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"runtime/debug"
	"sort"
	"strings"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nkeys"
)

const appAccount = "APP"

// usageError is a bad argument: its message and the usage go to stderr, exit 2.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, a ...any) error { return usageError{fmt.Sprintf(format, a...)} }

const usage = `usage:
  natsauth version
  natsauth init DIR [--accounts FILE]
  natsauth user DIR NAME [--account ACCOUNT] [--expires DURATION] [--permissions FILE --program KEY]
  natsauth revoke DIR NAME
  natsauth nkey DIR NAME`

func main() {
	err := run(os.Args[1:])
	var ue usageError
	switch {
	case err == nil:
	case errors.As(err, &ue):
		fmt.Fprintf(os.Stderr, "natsauth: %s\n%s\n", ue.msg, usage)
		os.Exit(2)
	default:
		fmt.Fprintf(os.Stderr, "natsauth: %s\n", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	if len(args) == 0 {
		return usagef("no command")
	}
	cmd, rest := args[0], args[1:]
	switch cmd {
	case "version":
		if len(rest) != 0 {
			return usagef("version takes no arguments")
		}
		fmt.Println(version())
		return nil
	case "init":
		return initCmd(rest)
	case "user":
		return userCmd(rest)
	case "revoke":
		dir, name, err := dirAndName("revoke", rest)
		if err != nil {
			return err
		}
		return revoke(dir, name)
	case "nkey":
		dir, name, err := dirAndName("nkey", rest)
		if err != nil {
			return err
		}
		return plainNkey(dir, name)
	default:
		return usagef("unknown command %q", cmd)
	}
}

// version: this tool and the versions of the two libraries it was built with (from the
// build info: they are what go.mod pins).
func version() string {
	out := "natsauth"
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, dep := range bi.Deps {
			if dep.Path == "github.com/nats-io/jwt/v2" || dep.Path == "github.com/nats-io/nkeys" {
				out += " " + filepath.Base(strings.TrimSuffix(dep.Path, "/v2")) + " " + dep.Version
			}
		}
		out += " " + bi.GoVersion
	}
	return out
}

var safeName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]*$`)

func dirAndName(cmd string, args []string) (string, string, error) {
	if len(args) != 2 {
		return "", "", usagef("%s takes DIR NAME", cmd)
	}
	if !safeName.MatchString(args[1]) {
		return "", "", usagef("NAME %q: letters, digits, '.', '_' and '-' only", args[1])
	}
	if args[1] == "sys" {
		return "", "", usagef("NAME %q: taken by the system account's user (sys.creds)", args[1])
	}
	return args[0], args[1], nil
}

func initCmd(args []string) error {
	fs := flag.NewFlagSet("init", flag.ContinueOnError)
	fs.SetOutput(new(bytes.Buffer))
	accountsFile := fs.String("accounts", "", "JSON file: the accounts, exports and imports")
	positional, err := parseInterspersed(fs, args)
	if err != nil {
		return usagef("init: %v", err)
	}
	if len(positional) != 1 {
		return usagef("init takes DIR")
	}
	var spec *accountsSpec
	if *accountsFile != "" {
		if spec, err = loadAccounts(*accountsFile); err != nil {
			return err
		}
	}
	return initDir(positional[0], spec)
}

// initDir makes the operator, SYS (with user sys), APP (JetStream without limits) and the
// accounts of spec.
func initDir(dir string, spec *accountsSpec) error {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Join(dir, "operator.jwt")); err == nil {
		return fmt.Errorf("%s already holds an operator (operator.jwt)", dir)
	}
	for _, sub := range []string{"accounts", "keys", "jwt"} {
		if err := os.MkdirAll(filepath.Join(dir, sub), 0o700); err != nil {
			return err
		}
	}

	op, err := newKey(dir, "operator", nkeys.CreateOperator)
	if err != nil {
		return err
	}
	opSigning, err := newKey(dir, "operator-signing", nkeys.CreateOperator)
	if err != nil {
		return err
	}
	sys, err := newKey(dir, "SYS", nkeys.CreateAccount)
	if err != nil {
		return err
	}
	app, err := newKey(dir, appAccount, nkeys.CreateAccount)
	if err != nil {
		return err
	}
	opPub, sysPub, appPub := pub(op), pub(sys), pub(app)
	signingPub := pub(opSigning)

	oc := jwt.NewOperatorClaims(opPub)
	oc.Name = "k8s-event-bridge-test"
	oc.SigningKeys.Add(signingPub)
	oc.SystemAccount = sysPub
	opJWT, err := oc.Encode(op) // the identity key signs only the operator
	if err != nil {
		return err
	}
	if err := writeFile(filepath.Join(dir, "operator.jwt"), []byte(opJWT+"\n"), 0o644); err != nil {
		return err
	}

	sc := jwt.NewAccountClaims(sysPub)
	sc.Name = "SYS"
	// nsc's system account exports $SYS.REQ.SERVER... services; the tests need none of them
	sysJWT, err := writeAccount(dir, sc, opSigning)
	if err != nil {
		return err
	}

	ac := jwt.NewAccountClaims(appPub)
	ac.Name = appAccount
	// JetStream is on for an account whose limits allow it: -1 is "no limit" (0 is "none")
	ac.Limits.JetStreamLimits = jwt.JetStreamLimits{
		MemoryStorage: jwt.NoLimit, DiskStorage: jwt.NoLimit,
		Streams: jwt.NoLimit, Consumer: jwt.NoLimit,
	}
	appJWT, err := writeAccount(dir, ac, opSigning)
	if err != nil {
		return err
	}
	preload := fmt.Sprintf("  %s: %q\n  %s: %q\n", sysPub, sysJWT, appPub, appJWT)
	if spec != nil {
		more, err := makeAccounts(dir, spec, opSigning)
		if err != nil {
			return err
		}
		preload += more
	}

	sysUser, err := userCreds(sys, "sys", nil)
	if err != nil {
		return err
	}
	if err := writeFile(filepath.Join(dir, "sys.creds"), sysUser, 0o600); err != nil {
		return err
	}

	// The full resolver: account JWTs in a directory the server owns (DIR/jwt), updated at
	// run time by $SYS.REQ.CLAIMS.UPDATE, synced between servers every `interval`; preload
	// seeds it (the server keeps a stored JWT that is newer than the preloaded one).
	conf := fmt.Sprintf(`# nats-server in operator mode (natsauth init)
operator: %q
system_account: %s
resolver: {
  type: full
  dir: %q
  allow_delete: false
  interval: "2m"
}
resolver_preload: {
%s}
`, filepath.Join(dir, "operator.jwt"), sysPub, filepath.Join(dir, "jwt"), preload)
	if err := writeFile(filepath.Join(dir, "resolver.conf"), []byte(conf), 0o644); err != nil {
		return err
	}
	fmt.Printf("operator %s\naccount SYS %s\naccount %s %s\n", opPub, sysPub, appAccount, appPub)
	return nil
}

// userCmd: NAME in APP, signed by APP's key, to DIR/NAME.creds; prints its public key.
func userCmd(args []string) error {
	fs := flag.NewFlagSet("user", flag.ContinueOnError)
	fs.SetOutput(new(bytes.Buffer)) // errors are reported by main, with the usage
	expires := fs.Duration("expires", 0, "the JWT expires this long from now")
	account := fs.String("account", appAccount, "the account of the user")
	permsFile := fs.String("permissions", "", "JSON file: program name -> permissions")
	program := fs.String("program", "", "the key of the permissions file to use")
	positional, err := parseInterspersed(fs, args)
	if err != nil {
		return usagef("user: %v", err)
	}
	dir, name, err := dirAndName("user", positional)
	if err != nil {
		return err
	}
	if *expires < 0 {
		return usagef("--expires %s: must be positive", *expires)
	}
	if (*permsFile == "") != (*program == "") {
		return usagef("--permissions and --program go together")
	}
	var perms *jwt.Permissions
	if *permsFile != "" {
		if perms, err = loadPermissions(*permsFile, *program); err != nil {
			return err
		}
	}
	if !safeName.MatchString(*account) || *account == "SYS" {
		return usagef("--account %q: not an account of init", *account)
	}
	app, err := loadKey(dir, *account)
	if err != nil {
		return err
	}
	uc := func(c *jwt.UserClaims) {
		if *expires > 0 {
			c.Expires = time.Now().Add(*expires).Unix()
		}
		if perms != nil {
			c.Permissions = *perms
		}
	}
	creds, err := userCreds(app, name, uc)
	if err != nil {
		return err
	}
	if err := writeFile(filepath.Join(dir, name+".creds"), creds, 0o600); err != nil {
		return err
	}
	kp, err := jwt.ParseDecoratedUserNKey(creds)
	if err != nil {
		return err
	}
	fmt.Println(pub(kp))
	return nil
}

// parseInterspersed parses flags before, between and after the positional arguments (the
// flag package stops at the first positional one).
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		if fs.NArg() == 0 {
			return positional, nil
		}
		positional = append(positional, fs.Arg(0))
		args = fs.Args()[1:]
	}
}

// subjects is one direction of a nats-server config's permissions: {"allow": [...],
// "deny": [...]}, or a list (or one subject) meaning allow.
type subjects struct{ Allow, Deny []string }

func (s *subjects) UnmarshalJSON(b []byte) error {
	var one string
	if json.Unmarshal(b, &one) == nil {
		s.Allow = []string{one}
		return nil
	}
	if json.Unmarshal(b, &s.Allow) == nil {
		return nil
	}
	var obj struct {
		Allow []string `json:"allow"`
		Deny  []string `json:"deny"`
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&obj); err != nil {
		return fmt.Errorf("subjects: a subject, a list or {allow, deny}: %v", err)
	}
	s.Allow, s.Deny = obj.Allow, obj.Deny
	return nil
}

// responses is allow_responses: true (one reply, within 2 minutes: the server's default) or
// {"max": N, "expires": "DURATION"}.
type responses struct {
	set     bool
	max     int
	expires time.Duration
}

func (r *responses) UnmarshalJSON(b []byte) error {
	var on bool
	if json.Unmarshal(b, &on) == nil {
		r.set = on
		return nil
	}
	var obj struct {
		Max     int    `json:"max"`
		Expires string `json:"expires"`
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&obj); err != nil {
		return fmt.Errorf("allow_responses: true, false or {max, expires}: %v", err)
	}
	r.set, r.max = true, obj.Max
	if obj.Expires != "" {
		d, err := time.ParseDuration(obj.Expires)
		if err != nil {
			return fmt.Errorf("allow_responses.expires: %v", err)
		}
		r.expires = d
	}
	return nil
}

type programPermissions struct {
	Publish        subjects  `json:"publish"`
	Subscribe      subjects  `json:"subscribe"`
	AllowResponses responses `json:"allow_responses"`
}

// loadPermissions reads one program's permissions (the shape of a nats-server config's
// `permissions`) and turns them into a user JWT's.
func loadPermissions(path, program string) (*jwt.Permissions, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var programs map[string]json.RawMessage
	if err := json.Unmarshal(raw, &programs); err != nil {
		return nil, fmt.Errorf("%s: not a JSON object of programs: %v", path, err)
	}
	entry, ok := programs[program]
	if !ok {
		known := make([]string, 0, len(programs))
		for k := range programs {
			known = append(known, k)
		}
		sort.Strings(known)
		return nil, usagef("--program %q: not in %s (it has %s)", program, path,
			strings.Join(known, ", "))
	}
	var pp programPermissions
	dec := json.NewDecoder(bytes.NewReader(entry))
	dec.DisallowUnknownFields() // a misspelt key must not leave a user unrestricted
	if err := dec.Decode(&pp); err != nil {
		return nil, fmt.Errorf("%s: %q: %v", path, program, err)
	}
	var p jwt.Permissions
	p.Pub.Allow.Add(pp.Publish.Allow...)
	p.Pub.Deny.Add(pp.Publish.Deny...)
	p.Sub.Allow.Add(pp.Subscribe.Allow...)
	p.Sub.Deny.Add(pp.Subscribe.Deny...)
	if pp.AllowResponses.set {
		// 0 and 0 are the server's defaults (1 reply, 2 minutes), as in its config
		p.Resp = &jwt.ResponsePermission{MaxMsgs: pp.AllowResponses.max,
			Expires: pp.AllowResponses.expires}
	}
	return &p, nil
}

// revoke adds NAME's public key (read from DIR/NAME.creds) to APP's revocations as of now:
// the server refuses every JWT of that key issued until now. Prints APP's new JWT, which
// the server learns from a $SYS.REQ.CLAIMS.UPDATE request (or its resolver directory).
func revoke(dir, name string) error {
	creds, err := os.ReadFile(filepath.Join(dir, name+".creds"))
	if err != nil {
		return err
	}
	userJWT, err := jwt.ParseDecoratedJWT(creds)
	if err != nil {
		return err
	}
	uc, err := jwt.DecodeUserClaims(userJWT)
	if err != nil {
		return err
	}
	ac, err := accountOf(dir, uc.Issuer)
	if err != nil {
		return err
	}
	ac.Revoke(uc.Subject)
	signer, err := loadKey(dir, "operator-signing")
	if err != nil {
		return err
	}
	accJWT, err := writeAccount(dir, ac, signer)
	if err != nil {
		return err
	}
	fmt.Println(accJWT)
	return nil
}

// plainNkey: a user key pair without a JWT, for a server's `authorization { users: [{nkey:
// U...}] }`: the seed to DIR/NAME.nk, the public key to stdout.
func plainNkey(dir, name string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	kp, err := newKeyAt(filepath.Join(dir, name+".nk"), nkeys.CreateUser)
	if err != nil {
		return err
	}
	fmt.Println(pub(kp))
	return nil
}

// userCreds: a user of the account whose key is `account`, as a .creds file (the JWT and
// the seed, decorated exactly as nsc writes them). `edit` sets expiry and permissions.
func userCreds(account nkeys.KeyPair, name string, edit func(*jwt.UserClaims)) ([]byte, error) {
	user, err := nkeys.CreateUser()
	if err != nil {
		return nil, err
	}
	uc := jwt.NewUserClaims(pub(user))
	uc.Name = name // signed by the account's own key: no issuer_account
	if edit != nil {
		edit(uc)
	}
	userJWT, err := uc.Encode(account)
	if err != nil {
		return nil, err
	}
	seed, err := user.Seed()
	if err != nil {
		return nil, err
	}
	return jwt.FormatUserConfig(userJWT, seed)
}

func writeAccount(dir string, ac *jwt.AccountClaims, signer nkeys.KeyPair) (string, error) {
	accJWT, err := ac.Encode(signer)
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, "accounts", ac.Name+".jwt")
	return accJWT, writeFile(path, []byte(accJWT+"\n"), 0o644)
}

func newKey(dir, name string, create func() (nkeys.KeyPair, error)) (nkeys.KeyPair, error) {
	return newKeyAt(filepath.Join(dir, "keys", name+".nk"), create)
}

func newKeyAt(path string, create func() (nkeys.KeyPair, error)) (nkeys.KeyPair, error) {
	kp, err := create()
	if err != nil {
		return nil, err
	}
	seed, err := kp.Seed()
	if err != nil {
		return nil, err
	}
	return kp, writeFile(path, append(seed, '\n'), 0o600)
}

func loadKey(dir, name string) (nkeys.KeyPair, error) {
	seed, err := os.ReadFile(filepath.Join(dir, "keys", name+".nk"))
	if err != nil {
		return nil, fmt.Errorf("%v (run natsauth init first)", err)
	}
	return nkeys.FromSeed(bytes.TrimSpace(seed))
}

func pub(kp nkeys.KeyPair) string {
	p, err := kp.PublicKey()
	if err != nil { // only for a wiped key pair: a bug here
		panic(err)
	}
	return p
}

// writeFile replaces path atomically (a temporary file in the same directory, renamed):
// a server or client reading it sees the old file or the new one.
func writeFile(path string, data []byte, mode os.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // after a successful rename: nothing to remove
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(mode); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// accountsSpec is deploy/nats/accounts.json (made by tools/natsperms.py from permissions.json).
type accountsSpec struct {
	Note     string                 `json:"note"`
	Owner    string                 `json:"owner"`
	Accounts map[string]accountSpec `json:"accounts"`
}

type accountSpec struct {
	JetStream bool     `json:"jetstream"`
	Users     []string `json:"users"`
	Exports   []struct {
		Service      string   `json:"service"`
		ResponseType string   `json:"response_type"`
		Accounts     []string `json:"accounts"`
	} `json:"exports"`
	Imports []struct {
		Service string `json:"service"`
		Account string `json:"account"`
	} `json:"imports"`
}

func loadAccounts(path string) (*accountsSpec, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var spec accountsSpec
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&spec); err != nil {
		return nil, fmt.Errorf("%s: %v", path, err)
	}
	if _, ok := spec.Accounts[spec.Owner]; !ok {
		return nil, fmt.Errorf("%s: owner %q is not one of its accounts", path, spec.Owner)
	}
	for name := range spec.Accounts {
		if !safeName.MatchString(name) || name == "SYS" || name == appAccount {
			return nil, fmt.Errorf("%s: account name %q", path, name)
		}
	}
	return &spec, nil
}

// makeAccounts writes the accounts of spec, signed by the operator's signing key: the owner
// (JetStream, no limits) exporting each service with a token required, and each other account
// importing what it imports with an activation token the owner signed for it alone. Returns
// their lines of resolver_preload.
func makeAccounts(dir string, spec *accountsSpec, signer nkeys.KeyPair) (string, error) {
	names := make([]string, 0, len(spec.Accounts))
	for name := range spec.Accounts {
		names = append(names, name)
	}
	sort.Strings(names)
	keys := map[string]nkeys.KeyPair{}
	for _, name := range names {
		kp, err := newKey(dir, name, nkeys.CreateAccount)
		if err != nil {
			return "", err
		}
		keys[name] = kp
	}
	preload := ""
	for _, name := range names {
		a := spec.Accounts[name]
		ac := jwt.NewAccountClaims(pub(keys[name]))
		ac.Name = name
		if a.JetStream {
			ac.Limits.JetStreamLimits = jwt.JetStreamLimits{
				MemoryStorage: jwt.NoLimit, DiskStorage: jwt.NoLimit,
				Streams: jwt.NoLimit, Consumer: jwt.NoLimit,
			}
		}
		for _, e := range a.Exports {
			rt := jwt.ResponseType(jwt.ResponseTypeSingleton)
			if e.ResponseType == "stream" {
				rt = jwt.ResponseTypeStream
			}
			ac.Exports.Add(&jwt.Export{
				Name: e.Service, Subject: jwt.Subject(e.Service), Type: jwt.Service,
				TokenReq: true, ResponseType: rt,
			})
		}
		for _, i := range a.Imports {
			exporter, ok := keys[i.Account]
			if !ok {
				return "", fmt.Errorf("account %s imports from %q, not an account", name, i.Account)
			}
			act := jwt.NewActivationClaims(pub(keys[name]))
			act.ImportSubject = jwt.Subject(i.Service)
			act.ImportType = jwt.Service
			token, err := act.Encode(exporter)
			if err != nil {
				return "", err
			}
			ac.Imports.Add(&jwt.Import{
				Name: i.Service, Subject: jwt.Subject(i.Service), Account: pub(exporter),
				Token: token, Type: jwt.Service,
			})
		}
		accJWT, err := writeAccount(dir, ac, signer)
		if err != nil {
			return "", err
		}
		preload += fmt.Sprintf("  %s: %q\n", pub(keys[name]), accJWT)
		fmt.Printf("account %s %s\n", name, pub(keys[name]))
	}
	return preload, nil
}

// accountOf: the claims of the account (in DIR/accounts) whose public key is issuer.
func accountOf(dir, issuer string) (*jwt.AccountClaims, error) {
	paths, err := filepath.Glob(filepath.Join(dir, "accounts", "*.jwt"))
	if err != nil {
		return nil, err
	}
	for _, path := range paths {
		raw, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		ac, err := jwt.DecodeAccountClaims(strings.TrimSpace(string(raw)))
		if err != nil {
			return nil, err
		}
		if ac.Subject == issuer {
			return ac, nil
		}
	}
	return nil, fmt.Errorf("no account of %s issued this user (%s)", dir, issuer)
}
