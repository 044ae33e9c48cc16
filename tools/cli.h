/* The rlock command-line tool: pieces shared by its files.
 *
 *   rlock.c  main: the lock command's arguments and the dispatch to the
 *            subcommands (connection options may come before status,
 *            unlock, ls and fence)
 *   rlock.1.scd  the manual page, rlock(1), in scdoc (tools/meson.build);
 *            rlock.1 its troff, committed (scripts/check-man)
 *   The subcommands, called by rlock.c only:
 *   run.c    `rlock NAME -- COMMAND`: the lock thread, signals, the child
 *   admin.c  `rlock status`, `rlock unlock --force`, through the library
 *            (rlock_client_info, rlock_client_force_unlock): tools/ has no
 *            Redis connection of its own
 *   ls.c     `rlock ls [PATTERN]`: rlock_scan_* and rlock_client_info
 *   fence.c  `rlock fence ...`: a token's check, guarded writes
 *   elect.c  `rlock elect NAME -- COMMAND`, `rlock leader NAME`: leader
 *            election (rlock_election_*)
 *   The helpers, called by the files above, never by each other upward:
 *   redlock.c  --redlock URI,URI,...: the list, its checks, one client per
 *            server and the RedLock that run.c then holds like a MultiLock
 *   describe.c  one name as status --json and ls --json write it
 *   whois.c  who holds it: the rlock client behind an owner
 *   connect.c  the connection options (-u, --uri-file, --tls-*,
 *            --sentinel-*), their checks and cli_connect(); run.c's
 *            release of a lock whose client is gone
 *   cli.c    --help, messages, exit codes, the kinds' options, durations,
 *            getopt errors
 *   out.c    escaping of what came from Redis, for text and JSON
 * No file calls rlock.c and no two files call each other, directly or
 * through others (scripts/check-layers reports any call circle in tools/).
 */
#ifndef RLOCK_CLI_H
#define RLOCK_CLI_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "rlock.h"

#define CLI_PROG "rlock"

/* Exit codes of the tool itself (sysexits.h values where one fits). A
 * command's own status, or 128+N when it died of signal N, passes through
 * unchanged. The table is repeated in the manual page (rlock.1.scd, EXIT
 * STATUS), in short in --help, and in docs/cli.md. */
enum {
  CLI_EXIT_CONFLICT = 1,    /* -n busy or -w ran out (default; see -E) */
  CLI_EX_USAGE = 64,        /* bad arguments or URI */
  CLI_EX_UNAVAILABLE = 69,  /* Redis refused: auth, ACL, wrong type, error
                               (RLOCK_EKIND, another kind of lock on NAME,
                               is a busy lock in run.c, not this) */
  CLI_EX_SOFTWARE = 70,     /* internal error */
  CLI_EX_OSERR = 71,        /* fork, pipe, thread, memory */
  CLI_EX_TEMPFAIL = 75,     /* Redis unreachable, did not answer in time,
                               is not a Redis server (RLOCK_EPROTO), or no
                               TLS session could be made with it
                               (RLOCK_ETLS: handshake, certificate); no
                               sentinel knows the master; no replica
                               confirmed the acquire (RLOCK_ENOREPLICA,
                               undone); the cluster cannot serve NAME now
                               (RLOCK_ECLUSTER: CLUSTERDOWN, TRYAGAIN,
                               redirect loops) */
  CLI_EX_LOCKLOST = 79,     /* lock lost while COMMAND ran (--on-lost=kill
                               stops COMMAND, warn lets it end), or found
                               gone at the release: never a success */
  CLI_EX_NOEXEC = 126,      /* COMMAND found but not executable */
  CLI_EX_NOTFOUND = 127,    /* COMMAND not found */
};

typedef enum cli_on_lost { CLI_ON_LOST_WARN, CLI_ON_LOST_KILL } cli_on_lost;

/* Which of Redisson's locks NAME is: the plain RLock (no option, the
 * default), the fair lock (--fair), the read or the write lock of the
 * read/write lock NAME (-s / -x), the fenced lock (--fenced), or the
 * non-reentrant lock and fair lock (--no-reenter, with --fair). */
/* One per kind of the library's registry (RLOCK_KIND_MAP: CLI_KIND_LOCK,
 * CLI_KIND_FAIR, ...; the spin lock has no option). */
typedef enum cli_kind {
#define CLI_KIND_ENUM(id, name, constructor) CLI_KIND_##id,
  RLOCK_KIND_MAP(CLI_KIND_ENUM)
#undef CLI_KIND_ENUM
} cli_kind;

/* The option that selects a kind ("--shared", ...; "" for the plain lock),
 * for messages. */
const char *cli_kind_option(cli_kind kind);

/* If getopt_long's `c` is a kind option (-s, -x, --fair, --fenced),
 * records it in *kind and returns 0, or CLI_EX_USAGE (message printed)
 * when another kind was chosen before: they exclude each other. Returns -1
 * when `c` is not a kind option. */
int cli_kind_parse(cli_kind *kind, int c);

/* A handle of that kind on `name` (rlock_new, rlock_new_fair, ...). */
int cli_kind_get(rlock_client *client, cli_kind kind, const char *name,
                 rlock **lock);

/* Prints why an acquire of `name` failed with RLOCK_EKIND, for `kind`. */
void cli_err_kind(cli_kind kind, const char *name);

/* The --tls-* options (rediss:// only), shared by the lock command, status
 * and unlock. Options only: no environment variable sets them (the CLI
 * reads only $REDIS_URL, whose rediss:// alone already means TLS with the
 * system's trust store). */
typedef struct cli_tls_opts {
  const char *ca_file;     /* --tls-ca-file */
  const char *ca_dir;      /* --tls-ca-dir */
  const char *cert_file;   /* --tls-cert */
  const char *key_file;    /* --tls-key */
  const char *server_name; /* --tls-server-name */
  bool insecure;           /* --tls-insecure */
  const char *first;       /* the first --tls-* option given, for messages;
                              NULL: none */
} cli_tls_opts;

/* --sentinel-user and --sentinel-password-file (redis+sentinel:// and
 * rediss+sentinel:// only), shared by the lock command, status and
 * unlock: the sentinels' own credentials (the URI's are the master's).
 * Options only, like the --tls-* ones; the password is read from a file so
 * that it shows neither in ps nor in the environment. */
typedef struct cli_sentinel_opts {
  const char *user;          /* --sentinel-user */
  const char *password_file; /* --sentinel-password-file */
  char *password;            /* its contents (cli_sentinel_check); freed
                                by cli_sentinel_free */
  const char *first;         /* the first --sentinel-* option given;
                                NULL: none */
} cli_sentinel_opts;

/* getopt_long values of the --tls-* options (above any short option and
 * the commands' own long-only values), and their table entries. */
enum {
  CLI_OPT_TLS_CA_FILE = 0x200,
  CLI_OPT_TLS_CA_DIR,
  CLI_OPT_TLS_CERT,
  CLI_OPT_TLS_KEY,
  CLI_OPT_TLS_SERVER_NAME,
  CLI_OPT_TLS_INSECURE,
  CLI_OPT_KIND_FAIR = 0x220,
  CLI_OPT_KIND_FENCED,
  CLI_OPT_SENTINEL_USER = 0x240,
  CLI_OPT_SENTINEL_PASSWORD_FILE,
  CLI_OPT_REDLOCK = 0x260,
  CLI_OPT_URI_FILE = 0x261,
};
#define CLI_TLS_LONGOPTS                                                       \
  {"tls-ca-file", required_argument, NULL, CLI_OPT_TLS_CA_FILE},               \
      {"tls-ca-dir", required_argument, NULL, CLI_OPT_TLS_CA_DIR},             \
      {"tls-cert", required_argument, NULL, CLI_OPT_TLS_CERT},                 \
      {"tls-key", required_argument, NULL, CLI_OPT_TLS_KEY},                   \
      {"tls-server-name", required_argument, NULL, CLI_OPT_TLS_SERVER_NAME},   \
      {"tls-insecure", no_argument, NULL, CLI_OPT_TLS_INSECURE}

#define CLI_SENTINEL_LONGOPTS                                                  \
  {"sentinel-user", required_argument, NULL, CLI_OPT_SENTINEL_USER},           \
      {"sentinel-password-file", required_argument, NULL,                      \
       CLI_OPT_SENTINEL_PASSWORD_FILE},                                        \
      {"uri-file", required_argument, NULL, CLI_OPT_URI_FILE}

/* The kind options, shared by the lock command and unlock --force. */
#define CLI_KIND_LONGOPTS                                                      \
  {"shared", no_argument, NULL, 's'},                                          \
      {"exclusive", no_argument, NULL, 'x'},                                   \
      {"fair", no_argument, NULL, CLI_OPT_KIND_FAIR},                          \
      {"fenced", no_argument, NULL, CLI_OPT_KIND_FENCED}

/* Everything `rlock [options] NAME -- COMMAND` was asked to do. */
typedef struct cli_run_opts {
  const char *uri;        /* resolved: -u, $REDIS_URL or the default */
  const char *name;       /* lock name (-m: the NAME1,NAME2,... list) */
  char **names;           /* -m: the names, split at the commas */
  size_t n_names;         /* -m: how many; 0: one lock, `name` */
  cli_kind kind;          /* -s, -x, --fair, --fenced; default the RLock */
  int64_t permits;        /* --permits N: permits of the permit-expirable
                             semaphore NAME of N permits; 0: a lock */
  int64_t take;           /* --take K: how many of them (0: 1) */
  char **command;         /* NULL-terminated argv for execvp */
  int64_t wait_ms;        /* < 0: forever; 0: -n */
  int64_t lease_ms;       /* < 0: watchdog mode */
  int64_t watchdog_ms;    /* watchdog_timeout_ms; 0: the library default */
  int64_t kill_after_ms;  /* grace between SIGTERM and SIGKILL */
  int conflict_exit_code; /* -E */
  cli_on_lost on_lost;
  bool orphan_ok;         /* --orphan-ok: no SIGTERM to COMMAND when rlock
                             dies */
  int verbose;            /* -v count: 1 acquire/release and the client's
                             diagnostics from INFO up, 2 DEBUG too */
  cli_tls_opts tls;
  cli_sentinel_opts sentinel;
  bool no_replica_sync;            /* --no-replica-sync */
  int64_t replica_sync_timeout_ms; /* --replica-sync-timeout; 0: default */
  const char *redlock; /* --redlock URI,URI,...: NAME as a RedLock */
} cli_run_opts;

/* Prints "Try 'rlock --help' for more information." on stderr. */
void cli_usage_hint(void);

/* Prints "rlock: <message>\n" on stderr. */
void cli_err(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Prints "rlock: <what>: <message of err>[ (<detail>)]\n" on stderr, the
 * detail being rlock_last_error() when it adds something. */
void cli_err_rlock(int err, const char *what);

/* After getopt_long() returned ':' or '?' for argv: prints what was wrong
 * and a hint to --help; returns CLI_EX_USAGE. */
int cli_getopt_error(int c, char **argv);

/* Writes the --help text: a short usage that names the manual page. */
void cli_help(FILE *out);

/* Reports a failed rlock_client_new() and returns the exit code. */
int cli_open_failed(int err);

/* The exit code for a negative RLOCK_E* code. */
int cli_exit_for(int err);

/* The URI to use: `flag` (-u) if given, else the first line of
 * --uri-file's file, else $REDIS_URL, else redis://127.0.0.1:6379. NULL
 * with the reason printed (exit 64): -u and --uri-file together, an
 * unreadable or empty file, $REDIS_URL set but empty. */
const char *cli_resolve_uri(const char *flag);

/* -u's value: a copy, and the password in argv (what /proc/PID/cmdline
 * and ps show) overwritten with '*' (docs/cli.md "Secrets"). */
const char *cli_take_uri(char *arg);

/* If `c` is --uri-file, records its path and returns true (the sentinel
 * option tables carry it, so every command takes it). */
bool cli_uri_file_option(int c, const char *arg);

/* If getopt_long's `c` is a --tls-* option, records it (optarg is its
 * value) and returns true. */
bool cli_tls_option(cli_tls_opts *t, int c, const char *arg);

/* After parsing: the --tls-* options against the resolved URI (they need
 * rediss://), each other (--tls-cert and --tls-key go together), and the
 * files (readable, so a wrong path is named as the option that gave it).
 * 0, or CLI_EX_USAGE with the message printed. */
int cli_tls_check(const cli_tls_opts *t, const char *uri);

/* Copies the --tls-* options into library options. */
void cli_tls_apply(const cli_tls_opts *t, rlock_options *o);

/* If getopt_long's `c` is a --sentinel-* option, records it and returns
 * true. */
bool cli_sentinel_option(cli_sentinel_opts *s, int c, const char *arg);

/* After parsing: the --sentinel-* options against the resolved URI (they
 * need a redis+sentinel:// or rediss+sentinel:// URI), each other
 * (--sentinel-user needs the password) and the password file, which is
 * read here (one line; a final newline is dropped). 0, or CLI_EX_USAGE
 * with the message printed. */
int cli_sentinel_check(cli_sentinel_opts *s, const char *uri);

/* Copies the --sentinel-* options into library options. */
void cli_sentinel_apply(const cli_sentinel_opts *s, rlock_options *o);

/* Wipes and frees the password read by cli_sentinel_check. */
void cli_sentinel_free(cli_sentinel_opts *s);

/* A duration: a bare number is seconds, as in flock(1) ("5", "0.5"); a
 * unit says otherwise ("250ms", "1.5s", "2m", "1h"). 0 with *out_ms set,
 * or one of the CLI_DURATION_* reasons. */
enum {
  CLI_DURATION_BAD = -1,   /* not of that form */
  CLI_DURATION_RANGE = -2, /* over 2^31-1 ms (~24.8 days) */
  CLI_DURATION_ZERO = -3,  /* not 0 but rounds to 0 ms */
};
int cli_parse_duration(const char *text, int64_t *out_ms);
/* The accepted forms, for messages. */
#define CLI_DURATION_FORMS                                                     \
  "a duration: a number of seconds (5, 0.5) or a number with a unit (250ms, " \
  "1.5s, 2m, 1h)"

/* cli_parse_duration for the option `opt` ("-w/--wait"): true, or false
 * with a message naming the option and the accepted forms printed. */
bool cli_duration_opt(const char *opt, const char *text, int64_t *out_ms);

/* Monotonic milliseconds. */
int64_t cli_now_ms(void);

/* `rlock status ...` / `rlock unlock ...` / `rlock ls ...` (ls.c): argv
 * starts at the subcommand. Return the process exit code. */
int cli_status_main(int argc, char **argv);
int cli_unlock_main(int argc, char **argv);
int cli_ls_main(int argc, char **argv);
/* `rlock fence ...` (fence.c): a token's check, guarded writes. */
int cli_fence_main(int argc, char **argv);

/* The subcommands' connection (connect.c): resolves the URI (-u,
 * --uri-file, $REDIS_URL, the default), checks the --tls-* and
 * --sentinel-* options against it and opens a client with them and the
 * other options of `base` (NULL: the defaults; its uri is replaced); the
 * sentinel password is wiped either way. 0, or the exit code with the
 * failure printed. */
int cli_connect(const char *uri_flag, const cli_tls_opts *tls,
                cli_sentinel_opts *sentinel, const rlock_options *base,
                rlock_client **client);

/* out.c: bytes that came from Redis, for a terminal or for JSON (the
 * forms are described in out.c and docs/cli.md). */
/* Writes len bytes of s escaped for text output. */
void cli_text_write(FILE *out, const char *s, size_t len);
/* The same for a C string. */
void cli_text(FILE *out, const char *s);
/* The escaped text as a malloc'd string; NULL when out of memory. */
char *cli_text_dup(const char *s, size_t len);
/* Writes s as a JSON string: quoted, escaped, valid UTF-8 (a byte that is
 * not part of valid UTF-8 as \udcHH, Python's surrogateescape). */
void cli_json_string(FILE *out, const char *s, size_t len);

/* Who holds it (whois.c): the rlock client behind an owner, through
 * rlock_client_holder, remembered per client id for one run; after CLIENT LIST
 * was refused once, not asked again. */
#define CLI_WHOIS_CACHE 32
typedef struct cli_whois_entry {
  char id[RLOCK_ID_LEN + 1];
  int rc; /* 1 found, 0 not an rlock client, < 0 error */
  rlock_holder h;
  char why[200];
} cli_whois_entry;
typedef struct cli_whois {
  rlock_client *client;
  bool refused; /* CLIENT LIST refused: why in refused_why */
  char refused_why[200];
  cli_whois_entry cache[CLI_WHOIS_CACHE];
  size_t n;
} cli_whois;
/* The holder behind owner (len bytes; a writer's ":write" allowed) of the
 * lock `name`: the entry (rc 1 found, 0 not an rlock client, < 0 error,
 * why set), or NULL when the owner has no client id (a foreign field). */
const cli_whois_entry *cli_whois_get(cli_whois *w, const char *name,
                                     const char *owner, size_t len);
/* One line for a human: "pid P (PROGRAM) on HOST, connected for N s, from
 * ADDR", or "not known as an rlock client (WHY)"; escaped. */
void cli_whois_text(FILE *out, const cli_whois_entry *e);
/* JSON members for the entry, each starting with ',':
 * ,"rlock_client":true,"host":...,"pid":...,"program":...,
 * "connected_ms":...,"addr":... or ,"rlock_client":false,"why":... */
void cli_whois_json(FILE *out, const cli_whois_entry *e);

/* ---- describe.c: one name as status --json and ls --json write it ---- */

/* The kind's name as --json writes it, and its words as the listings
 * print them (from RLOCK_INFO_KIND_MAP). */
const char *cli_info_kind_name(rlock_info_kind kind);
const char *cli_info_kind_words(rlock_info_kind kind);

/* An owner "<client id>:<thread id>" (a writer's with ":write") split into
 * its parts; false when the field is not of that form. */
bool cli_owner_parts(const rlock_info_entry *e, bool writer,
                     size_t *client_len, const char **thread,
                     size_t *thread_len);

/* A fenced lock that is an election's (its holder wrote the value key):
 * the leader's state in *st; false otherwise (or on error: the name is
 * then described as the lock alone). */
bool cli_election_of(rlock_client *client, const char *name,
                     const rlock_info *info, rlock_election_state *st);

/* Prints "  field F = V" (escaped) for a hash field that is no hold
 * count. */
void cli_field_text(const rlock_info_entry *e);
/* A FasterMultiLock group's held value (a counted holder): "  value field
 * F: held by OWNER (count N, expires in N ms)". */
void cli_group_hold_text(const rlock_info_entry *e);

/* Writes the JSON object describing `name` (its fields: docs/cli.md,
 * "JSON"); election NULL: none. */
void cli_info_json(const char *name, size_t name_len, const rlock_info *info,
                   const rlock_election_state *election, cli_whois *w);

/* `rlock [options] NAME -- COMMAND`. Returns the process exit code. */
int cli_run(const cli_run_opts *o);

/* Releases the lock `name` of `kind` if (and only if) `owner` holds it,
 * publishing that kind's unlock message so a waiter wakes, through a
 * client of its own (rlock_force_unlock_holder), on the same URI, TLS and
 * sentinel options. For the rare case where the lock was acquired by a
 * client that is already closed. Returns 1 released, 0 not held by owner,
 * or a negative RLOCK_E* code. */
int cli_release_orphan(const char *uri, const cli_tls_opts *tls,
                       const cli_sentinel_opts *sentinel, cli_kind kind, const char *name, const char *owner);

/* --redlock (redlock.c). After parsing: the list split and checked
 * (not with -u, -m, --permits or --fenced; the --tls-* options against
 * every URI), o->uri set to the first URI. 0, or CLI_EX_USAGE with the
 * message printed. */
int cli_redlock_check(cli_run_opts *o, const char *uri_flag);
/* Opens a client per URI with `base` (uri replaced), gets NAME of o->kind
 * on each and makes the RedLock; *first receives the first client, which
 * the caller closes. 0, or the exit code with the failure printed. */
int cli_redlock_open(const cli_run_opts *o, const rlock_options *base,
                     rlock_client **first, rlock **rl);
/* Closes the other clients (after the RedLock is freed). */
void cli_redlock_close(void);
/* `rlock elect ...` / `rlock leader ...` (elect.c): argv starts at the
 * subcommand, which cli_is_elect() recognises. The process exit code. */
bool cli_is_elect(const char *arg);
int cli_elect_main(int argc, char **argv);

#endif
