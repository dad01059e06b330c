// Package pgcluster runs a private PostgreSQL cluster from the machine's
// server binaries: `orrery dev` keeps one under .orrery/, and tests start a
// throwaway one on a free port. When the process runs as root the server
// runs as the postgres user (PostgreSQL refuses root), so the cluster's
// folder is handed to that user.
package pgcluster

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// ErrNoServer means no PostgreSQL server binaries were found.
var ErrNoServer = errors.New("pgcluster: PostgreSQL server binaries not found (install the postgresql package, or set ORRERY_PG_BIN to the folder holding postgres and initdb)")

// Config describes a cluster. Dir is required; everything else has a default.
type Config struct {
	// Dir holds the cluster: Dir/data, Dir/run (socket) and Dir/postgres.log.
	Dir string
	// Port to listen on at 127.0.0.1; 0 picks a free one.
	Port int
	// Database is created if missing; default "orrery".
	Database string
	// Ephemeral trades durability for speed (fsync off): for tests only.
	Ephemeral bool
	// Settings are extra postgresql.conf settings passed on the command line.
	Settings map[string]string
	Logger   *slog.Logger
}

func (c *Config) withDefaults() error {
	if c.Dir == "" {
		return errors.New("pgcluster: Config.Dir is required")
	}
	abs, err := filepath.Abs(c.Dir)
	if err != nil {
		return fmt.Errorf("pgcluster: Config.Dir: %w", err)
	}
	c.Dir = abs
	if c.Database == "" {
		c.Database = "orrery"
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return nil
}

// Cluster is a running PostgreSQL server.
type Cluster struct {
	cfg      Config
	port     int
	password string // the postgres role's, kept in Dir/password (0600)
	cmd      *exec.Cmd
	done     chan error
}

// hbaConf is the cluster's pg_hba.conf, written at every start: the
// socket, in a folder only the server's user (and root) can enter,
// trusts its local logins; TCP logins need the password kept in
// Dir/password. Before, every local TCP login was trusted as superuser,
// so any local process (a dev worker's command step) could run programs
// as the server's user (COPY ... FROM PROGRAM).
const hbaConf = `# Written by orrery (package pgcluster) at every start.
local all all trust
host  all all 127.0.0.1/32 scram-sha-256
host  all all ::1/128      scram-sha-256
`

// passwordFile is where the postgres role's password is kept, in Dir.
const passwordFile = "password"

// readPassword reads Dir/password, making it (32 random bytes, in hex;
// mode 0600) on first use.
func readPassword(dir string) (string, error) {
	path := filepath.Join(dir, passwordFile)
	b, err := os.ReadFile(path)
	if pw := strings.TrimSpace(string(b)); err == nil && len(pw) >= 32 {
		if _, herr := hex.DecodeString(pw); herr != nil {
			return "", fmt.Errorf("pgcluster: %s holds no password of hex digits: remove it to have a new one made", path)
		}
		return pw, os.Chmod(path, 0o600)
	}
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("pgcluster: %w", err)
	}
	raw := make([]byte, 32)
	if _, err := rand.Read(raw); err != nil {
		return "", fmt.Errorf("pgcluster: %w", err)
	}
	pw := hex.EncodeToString(raw)
	if err := os.WriteFile(path, []byte(pw+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("pgcluster: %w", err)
	}
	return pw, os.Chmod(path, 0o600) // WriteFile keeps an existing file's mode
}

// BinDir finds the folder with the server binaries: $ORRERY_PG_BIN, else the
// newest /usr/lib/postgresql/*/bin (Debian), else the folder of `postgres`
// on PATH.
func BinDir() (string, error) {
	if dir := os.Getenv("ORRERY_PG_BIN"); dir != "" {
		if _, err := os.Stat(filepath.Join(dir, "postgres")); err != nil {
			return "", fmt.Errorf("pgcluster: ORRERY_PG_BIN=%s: %w", dir, err)
		}
		return dir, nil
	}
	matches, _ := filepath.Glob("/usr/lib/postgresql/*/bin/postgres")
	sort.Slice(matches, func(i, j int) bool { return pgMajor(matches[i]) > pgMajor(matches[j]) })
	if len(matches) > 0 {
		return filepath.Dir(matches[0]), nil
	}
	if p, err := exec.LookPath("postgres"); err == nil {
		return filepath.Dir(p), nil
	}
	return "", ErrNoServer
}

func pgMajor(path string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(path))))
	return n
}

// Start initializes the cluster if Dir holds none, starts the server and
// waits until it accepts connections and the database exists. The server
// stops when Stop is called or when this process dies.
func Start(ctx context.Context, cfg Config) (*Cluster, error) {
	if err := cfg.withDefaults(); err != nil {
		return nil, err
	}
	bin, err := BinDir()
	if err != nil {
		return nil, err
	}
	owner, err := serverUser()
	if err != nil {
		return nil, err
	}
	c := &Cluster{cfg: cfg, port: cfg.Port}
	dataDir := filepath.Join(cfg.Dir, "data")
	runDir := filepath.Join(cfg.Dir, "run")
	for _, d := range []string{cfg.Dir, runDir} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("pgcluster: %w", err)
		}
	}
	if err := owner.chown(cfg.Dir); err != nil {
		return nil, err
	}
	if _, err := os.Stat(filepath.Join(dataDir, "PG_VERSION")); errors.Is(err, os.ErrNotExist) {
		cfg.Logger.Info("initializing PostgreSQL cluster", "dir", dataDir)
		args := []string{"-D", dataDir, "-U", "postgres", "--auth=trust", "--encoding=UTF8", "--locale=C"}
		if cfg.Ephemeral {
			args = append(args, "--no-sync")
		}
		if out, err := owner.command(filepath.Join(bin, "initdb"), args...).CombinedOutput(); err != nil {
			return nil, fmt.Errorf("pgcluster: initdb: %w\n%s", err, out)
		}
	}
	if c.password, err = readPassword(cfg.Dir); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dataDir, "pg_hba.conf"), []byte(hbaConf), 0o600); err != nil {
		return nil, fmt.Errorf("pgcluster: %w", err)
	}
	if owner.cred != nil {
		if err := os.Chown(filepath.Join(dataDir, "pg_hba.conf"), int(owner.cred.Uid), int(owner.cred.Gid)); err != nil {
			return nil, fmt.Errorf("pgcluster: %w", err)
		}
	}
	if pid := runningPostmaster(dataDir); pid > 0 {
		return nil, fmt.Errorf("pgcluster: PostgreSQL (pid %d) is already running on %s; is another `orrery dev` using this folder?", pid, dataDir)
	}
	if c.port == 0 {
		if c.port, err = freePort(); err != nil {
			return nil, err
		}
	}

	settings := map[string]string{
		"listen_addresses":        "127.0.0.1",
		"port":                    strconv.Itoa(c.port),
		"unix_socket_directories": runDir,
		"max_connections":         "200",
		"logging_collector":       "off",
	}
	if cfg.Ephemeral {
		settings["fsync"] = "off"
		settings["synchronous_commit"] = "off"
		settings["full_page_writes"] = "off"
	}
	for k, v := range cfg.Settings {
		settings[k] = v
	}
	args := []string{"-D", dataDir}
	for k, v := range settings {
		args = append(args, "-c", k+"="+v)
	}
	logFile, err := os.OpenFile(filepath.Join(cfg.Dir, "postgres.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("pgcluster: %w", err)
	}
	defer logFile.Close()
	c.cmd = owner.command(filepath.Join(bin, "postgres"), args...)
	c.cmd.Stdout, c.cmd.Stderr = logFile, logFile
	// Own process group, so a Ctrl-C in the terminal reaches us first and we
	// stop the server after the API; and a fast shutdown if we die.
	c.cmd.SysProcAttr.Setpgid = true
	c.cmd.SysProcAttr.Pdeathsig = syscall.SIGINT
	if err := c.cmd.Start(); err != nil {
		return nil, fmt.Errorf("pgcluster: start postgres: %w", err)
	}
	c.done = make(chan error, 1)
	go func() { c.done <- c.cmd.Wait() }()

	if err := c.waitReady(ctx); err != nil {
		_ = c.Stop()
		return nil, err
	}
	if err := c.ensureDatabase(ctx); err != nil {
		_ = c.Stop()
		return nil, err
	}
	if err := c.setPassword(ctx); err != nil {
		_ = c.Stop()
		return nil, err
	}
	cfg.Logger.Info("PostgreSQL ready", "port", c.port, "dir", cfg.Dir)
	return c, nil
}

// Port is the TCP port the server listens on at 127.0.0.1.
func (c *Cluster) Port() int { return c.port }

// DSN is a connection string for database db (the configured one when
// empty), over TCP with the password.
func (c *Cluster) DSN(db string) string {
	if db == "" {
		db = c.cfg.Database
	}
	return fmt.Sprintf("postgres://postgres:%s@127.0.0.1:%d/%s?sslmode=disable", c.password, c.port, db)
}

// RedactedDSN is DSN with the password left out (its file named instead),
// to print.
func (c *Cluster) RedactedDSN(db string) string {
	return strings.Replace(c.DSN(db), ":"+c.password+"@", ":PASSWORD@", 1) + " (PASSWORD in " + filepath.Join(c.cfg.Dir, passwordFile) + ")"
}

// socketDSN connects through the socket in Dir/run, which the server's
// user (and root) alone can reach: how the cluster sets its password.
func (c *Cluster) socketDSN(db string) string {
	return fmt.Sprintf("host=%s port=%d user=postgres dbname=%s sslmode=disable", filepath.Join(c.cfg.Dir, "run"), c.port, db)
}

// setPassword gives the postgres role the password of Dir/password.
func (c *Cluster) setPassword(ctx context.Context) error {
	conn, err := pgx.Connect(ctx, c.socketDSN("postgres"))
	if err != nil {
		return fmt.Errorf("pgcluster: %w", err)
	}
	defer conn.Close(ctx)
	// ALTER ROLE takes no parameters; the password is hex (readPassword).
	// Not in the server's log, even when the statement fails.
	for _, set := range []string{"SET log_statement = 'none'", "SET log_min_error_statement = 'panic'", "SET log_min_duration_statement = -1"} {
		if _, err := conn.Exec(ctx, set); err != nil {
			return fmt.Errorf("pgcluster: %w", err)
		}
	}
	if _, err := conn.Exec(ctx, "ALTER ROLE postgres PASSWORD '"+c.password+"'"); err != nil {
		return fmt.Errorf("pgcluster: set the password: %w", err)
	}
	return nil
}

// Stop shuts the server down (fast mode) and waits for it to exit.
func (c *Cluster) Stop() error {
	if c.cmd == nil || c.cmd.Process == nil {
		return nil
	}
	_ = c.cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-c.done:
		return nil
	case <-time.After(30 * time.Second):
		_ = c.cmd.Process.Kill()
		<-c.done
		return errors.New("pgcluster: server did not stop within 30s; killed")
	}
}

func (c *Cluster) waitReady(ctx context.Context) error {
	deadline := time.Now().Add(60 * time.Second)
	for {
		conn, err := pgx.Connect(ctx, c.socketDSN("postgres"))
		if err == nil {
			return conn.Close(ctx)
		}
		select {
		case exitErr := <-c.done:
			c.done <- exitErr
			return fmt.Errorf("pgcluster: postgres exited during start-up (%v); see %s", exitErr, filepath.Join(c.cfg.Dir, "postgres.log"))
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("pgcluster: postgres not ready after 60s: %w", err)
		}
	}
}

func (c *Cluster) ensureDatabase(ctx context.Context) error {
	conn, err := pgx.Connect(ctx, c.socketDSN("postgres"))
	if err != nil {
		return fmt.Errorf("pgcluster: %w", err)
	}
	defer conn.Close(ctx)
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", c.cfg.Database).Scan(&exists); err != nil {
		return fmt.Errorf("pgcluster: %w", err)
	}
	if exists {
		return nil
	}
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{c.cfg.Database}.Sanitize()); err != nil {
		return fmt.Errorf("pgcluster: create database: %w", err)
	}
	return nil
}

// runningPostmaster returns the pid in dataDir's postmaster.pid when that
// process is alive (a stale file from a crash is left for postgres to clear).
func runningPostmaster(dataDir string) int {
	b, err := os.ReadFile(filepath.Join(dataDir, "postmaster.pid"))
	if err != nil {
		return 0
	}
	first, _, _ := strings.Cut(string(b), "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(first))
	if err != nil || pid <= 0 {
		return 0
	}
	if err := syscall.Kill(pid, 0); err != nil && !errors.Is(err, syscall.EPERM) {
		return 0
	}
	return pid
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("pgcluster: pick a port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// runAs is the account the server runs under: the current one, or postgres
// when we are root.
type runAs struct {
	cred *syscall.Credential // nil: the current user
	home string
}

func serverUser() (runAs, error) {
	if os.Geteuid() != 0 {
		return runAs{}, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return runAs{}, fmt.Errorf("pgcluster: running as root needs a postgres user to run the server: %w", err)
	}
	uid, _ := strconv.ParseUint(u.Uid, 10, 32)
	gid, _ := strconv.ParseUint(u.Gid, 10, 32)
	return runAs{cred: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, home: u.HomeDir}, nil
}

func (r runAs) command(name string, args ...string) *exec.Cmd {
	cmd := exec.Command(name, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: r.cred}
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	if r.cred != nil {
		cmd.Env = append(cmd.Env, "HOME="+r.home)
		cmd.Dir = "/"
	}
	return cmd
}

// chown hands dir (recursively) to the server's user and checks that the
// folders above it let that user through.
func (r runAs) chown(dir string) error {
	if r.cred == nil {
		return nil
	}
	err := filepath.Walk(dir, func(path string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(path, int(r.cred.Uid), int(r.cred.Gid))
	})
	if err != nil {
		return fmt.Errorf("pgcluster: hand %s to the postgres user: %w", dir, err)
	}
	for p := filepath.Dir(dir); ; p = filepath.Dir(p) {
		if fi, err := os.Stat(p); err == nil && fi.Mode().Perm()&0o001 == 0 {
			return fmt.Errorf("pgcluster: the postgres user cannot reach %s: %s is not searchable by others (chmod o+x %s, or choose another folder)", dir, p, p)
		}
		if p == "/" {
			return nil
		}
	}
}
