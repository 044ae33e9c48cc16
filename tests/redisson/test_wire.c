/* The wire side by side (issue 32): for each operation of each kind, the
 * commands Java Redisson sends and the commands rlock sends, captured with
 * MONITOR on the shared server, with names, owners, ids and clock values
 * normalised, and scripts compared by their SHA1 (the server's SCRIPT LOAD
 * of the text Java sends) - compared here. The differences that remain are
 * listed in `known` below, each with its reason in docs/wire-protocol.md
 * ("Side by side with Redisson"). */
#include "rs.h"

#include <criterion/criterion.h>
#include <ctype.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

TestSuite(wire, .timeout = 60);

#define LINE_LEN 2048
#define MAX_LINES 48

typedef struct side {
  const char *name;    /* the object's name on this side */
  const char *owner;   /* "<id>:<thread>" */
  const char *id;      /* the client id alone */
} side;

/* Undoes MONITOR's quoting of one argument starting after its opening
 * quote; returns the position after the closing quote. */
static const char *unquote(const char *s, char *out, size_t n) {
  size_t o = 0;
  while (*s && *s != '"') {
    char c = *s++;
    if (c == '\\' && *s) {
      char e = *s++;
      switch (e) {
      case 'n': c = '\n'; break;
      case 'r': c = '\r'; break;
      case 't': c = '\t'; break;
      case 'a': c = '\a'; break;
      case 'b': c = '\b'; break;
      case 'x': {
        char hex[3] = {s[0], s[0] ? s[1] : 0, 0};
        c = (char)strtol(hex, NULL, 16);
        /* A NUL byte (a random permit id has one now and then) would end
         * the C string here and hide the id from norm_arg: keep it as
         * another non-printable byte, which norm_arg reads as an id. */
        if (c == '\0')
          c = '\x01';
        s += 2;
        break;
      }
      default: c = e; break;
      }
    }
    if (o + 1 < n)
      out[o++] = c;
  }
  out[o] = '\0';
  return *s == '"' ? s + 1 : s;
}

/* Replaces every occurrence of `what` in buf (size n) by `with`. */
static void replace_all(char *buf, size_t n, const char *what, const char *with) {
  if (what == NULL || *what == '\0')
    return;
  char tmp[LINE_LEN * 2];
  size_t o = 0, wl = strlen(what), rl = strlen(with);
  for (const char *p = buf; *p;) {
    if (strncmp(p, what, wl) == 0) {
      if (o + rl < sizeof tmp) {
        memcpy(tmp + o, with, rl);
        o += rl;
      }
      p += wl;
    } else if (o + 1 < sizeof tmp) {
      tmp[o++] = *p++;
    } else {
      p++;
    }
  }
  tmp[o] = '\0';
  snprintf(buf, n, "%s", tmp);
}

static bool all_hex(const char *s, size_t len) {
  for (size_t i = 0; i < len; i++)
    if (!isxdigit((unsigned char)s[i]))
      return false;
  return true;
}

/* One argument normalised: names, owners, ids, clock values. */
static void norm_arg(char *a, size_t n, const side *sd) {
  replace_all(a, n, sd->owner, "<owner>");
  replace_all(a, n, sd->id, "<client>");
  replace_all(a, n, sd->name, "<name>");
  size_t len = strlen(a);
  /* 32 hex: a latch or permit id (both sides make random ones) */
  for (size_t i = 0; i + 32 <= len; i++) {
    if (all_hex(a + i, 32) && (i == 0 || !isxdigit((unsigned char)a[i - 1])) &&
        (i + 32 == len || !isxdigit((unsigned char)a[i + 32]))) {
      char tmp[LINE_LEN];
      snprintf(tmp, sizeof tmp, "%.*s<hex32>%s", (int)i, a, a + i + 32);
      snprintf(a, n, "%s", tmp);
      len = strlen(a);
    }
  }
  /* a permit id as 16 raw bytes (both sides store it so) */
  bool printable = true;
  for (size_t i = 0; i < len; i++)
    printable = printable && isprint((unsigned char)a[i]);
  if (!printable) {
    snprintf(a, n, "<id>");
    return;
  }
  /* wall-clock milliseconds (13 digits) */
  char *end;
  long long v = strtoll(a, &end, 10);
  if (*a && *end == '\0' && v > 1000000000000LL)
    snprintf(a, n, "<clock>");
}

typedef struct seq {
  char line[MAX_LINES][LINE_LEN];
  size_t n;
} seq;

/* Commands a script only reads with: their results show in what it
 * writes, which is compared. */
static const char *const READS[] = {
    "EXISTS", "HEXISTS", "GET", "HGET", "HMGET", "HGETALL", "HKEYS", "HLEN",
    "TYPE", "PTTL", "TTL", "ZRANGE", "ZRANGEBYSCORE", "ZSCORE", "ZCARD",
    "ZCOUNT", "LRANGE", "LINDEX", "LLEN", "TIME", "PEXPIRETIME", "HSTRLEN",
    "MGET", "SCARD", NULL};

static bool is_read(const char *cmd) {
  for (size_t i = 0; READS[i]; i++)
    if (strcmp(cmd, READS[i]) == 0)
      return true;
  return false;
}

static bool is_num(const char *s) {
  if (*s == '\0')
    return false;
  for (; *s; s++)
    if (!isdigit((unsigned char)*s))
      return false;
  return true;
}

static void push(seq *s, const char *line) {
  if (s->n < MAX_LINES)
    snprintf(s->line[s->n++], LINE_LEN, "%s", line);
}

static void join(char *out, size_t n, const char *pre, char args[][LINE_LEN],
                 size_t from, size_t to) {
  size_t o = (size_t)snprintf(out, n, "%s", pre);
  for (size_t i = from; i < to && o < n; i++)
    o += (size_t)snprintf(out + o, n - o, " %s", args[i]);
}

/* A MONITOR line normalised into s (zero or more lines): names, owners,
 * ids and clock values replaced; the script's SHA1 dropped (each side runs
 * its own Lua: what the scripts write is compared instead); reads inside
 * scripts dropped; equivalent forms made one (a multi-field HSET/HDEL as
 * one command per field, SET .. PX as SET + PEXPIRE); the unlock latch's
 * TTL, and the top-level DEL/UNLINK of latches (Java deletes each after the
 * reply, rlock in batches), left out. Lines not about this side's object
 * are ignored. */
static void norm_line(const char *line, const side *sd, seq *s) {
  static char args[MAX_LINES][LINE_LEN];
  const char *p = strstr(line, "] ");
  if (p == NULL)
    return;
  bool lua = strstr(line, " lua]") != NULL;
  p += 2;
  if (strstr(p, sd->name) == NULL)
    return;
  size_t na = 0;
  while (*p && na < MAX_LINES) {
    while (*p == ' ')
      p++;
    if (*p != '"')
      break;
    p = unquote(p + 1, args[na], sizeof args[na]);
    na++;
  }
  if (na == 0)
    return;
  for (char *c = args[0]; *c; c++)
    *c = (char)toupper((unsigned char)*c);
  if (lua && is_read(args[0]))
    return;
  bool latch = false;
  for (size_t i = 1; i < na; i++)
    latch = latch || strstr(args[i], "redisson_unlock_latch") != NULL;
  if (!lua && latch && (strcmp(args[0], "DEL") == 0 || strcmp(args[0], "UNLINK") == 0))
    return;
  size_t first = 1;
  if ((strcmp(args[0], "EVAL") == 0 || strcmp(args[0], "EVALSHA") == 0) && na > 1) {
    snprintf(args[0], LINE_LEN, "EVAL");
    first = 2;
  }
  for (size_t i = first; i < na; i++)
    norm_arg(args[i], LINE_LEN, sd);
  if (latch)
    for (size_t i = first; i + 1 < na; i++)
      if ((strcasecmp(args[i], "PUBLISH") == 0 || strcasecmp(args[i], "SPUBLISH") == 0 ||
           strcasecmp(args[i], "px") == 0) && is_num(args[i + 1]))
        snprintf(args[i + 1], LINE_LEN, "<latch-ttl>");
  /* a latch line's last argument, when a number, is the latch's TTL
   * (spin: no PUBLISH before it) */
  if (latch && !lua && first == 2 && is_num(args[na - 1]))
    snprintf(args[na - 1], LINE_LEN, "<latch-ttl>");
  /* a read unlock re-applies what is left of the longest read lease: a
   * clock reading */
  if (lua && strcmp(args[0], "PEXPIRE") == 0 && na == 3 && is_num(args[2]) &&
      atoll(args[2]) > RS_LEASE_MS - 2000 && atoll(args[2]) < RS_LEASE_MS)
    snprintf(args[2], LINE_LEN, "<lease left>");
  /* a write re-entry adds its lease to what is left */
  if (lua && strcmp(args[0], "PEXPIRE") == 0 && na == 3 && is_num(args[2]) &&
      atoll(args[2]) > 2 * RS_LEASE_MS - 2000 && atoll(args[2]) <= 2 * RS_LEASE_MS)
    snprintf(args[2], LINE_LEN, "<lease left + lease>");
  char out[LINE_LEN], pre[160];
  snprintf(pre, sizeof pre, "%s%s", lua ? "[lua] " : "", args[0]);
  if (lua && (strcmp(args[0], "HSET") == 0 || strcmp(args[0], "HDEL") == 0) && na > 2) {
    size_t step = strcmp(args[0], "HSET") == 0 ? 2 : 1;
    for (size_t i = 2; i + step <= na; i += step) {
      size_t o = (size_t)snprintf(out, sizeof out, "%s %s", pre, args[1]);
      for (size_t k = 0; k < step && o < sizeof out; k++)
        o += (size_t)snprintf(out + o, sizeof out - o, " %s", args[i + k]);
      push(s, out);
    }
    return;
  }
  if (lua && strcmp(args[0], "SET") == 0 && na == 5 && strcasecmp(args[3], "px") == 0) {
    join(out, sizeof out, pre, args, 1, 3);
    push(s, out);
    snprintf(out, sizeof out, "[lua] PEXPIRE %s %s", args[1], args[4]);
    push(s, out);
    return;
  }
  join(out, sizeof out, pre, args, first, na);
  /* the same call again in a row counts once: a script re-sent after
   * NOSCRIPT (EVALSHA, then EVAL), a spin lock's polls (how many depends
   * on the clock) */
  if (!lua && s->n > 0 && strcmp(s->line[s->n - 1], out) == 0)
    return;
  push(s, out);
}

static int cmp_line(const void *a, const void *b) { return strcmp(a, b); }

static void take(rs_monitor *m, const side *sd, seq *s) {
  size_t n;
  char **lines = rs_monitor_take(m, &n);
  s->n = 0;
  for (size_t i = 0; i < n; i++)
    norm_line(lines[i], sd, s);
  rs_lines_free(lines, n);
  /* the fields of one HDEL in any order */
  for (size_t i = 0; i < s->n;) {
    size_t j = i;
    while (j < s->n && strncmp(s->line[j], "[lua] HDEL ", 11) == 0)
      j++;
    if (j - i > 1)
      qsort(s->line[i], j - i, LINE_LEN, cmp_line);
    i = j > i ? j : i + 1;
  }
}

static void show(const char *who, const seq *s) {
  for (size_t i = 0; i < s->n; i++)
    fprintf(stderr, "    %s %s\n", who, s->line[i]);
}

static void drop_line(seq *s, size_t i) {
  memmove(s->line[i], s->line[i + 1], (s->n - i - 1) * LINE_LEN);
  s->n--;
}

/* Differences that remain, each explained in docs/wire-protocol.md
 * ("Side by side with Redisson"): on the side named, within operations
 * whose name contains `op` (and not `not_op`), the token sequence `from` is
 * read as `to`. A rule that fires is reported; anything else that differs
 * fails the test. */
typedef struct known {
  const char *id, *op, *not_op;
  char side; /* 'j' Java, 'c' rlock */
  const char *from, *to;
} known;

#define WD_S "2000"   /* RS_WATCHDOG_MS */
#define LEASE_S "30000" /* RS_LEASE_MS */

static const known KNOWN[] = {
    /* unlock: Java re-applies its lockWatchdogTimeout, rlock the hold's lease */
    {"unlock-lease", "unlock", "multi:", 'j', WD_S, "<unlock-lease>"},
    {"unlock-lease", "unlock", "multi:", 'c', LEASE_S, "<unlock-lease>"},
    /* fair tryLock(0): rlock sends Java's tryLock() argument order */
    {"fair-try-order", "fair tryLock", NULL, 'c', "<clock> 300000", "300000 <clock>"},
    {"fair-try-order", "fair re-entry", NULL, 'c', "<clock> 300000", "300000 <clock>"},
    /* permit semaphore: rlock's trySetPermits takes a TTL (0: none) */
    {"psem-set-ttl", "permit semaphore trySetPermits", NULL, 'c', "3 PUBLISH 0", "3 PUBLISH"},
    /* permit semaphore: one count script for available and acquired */
    {"psem-count", "permit semaphore availablePermits", NULL, 'c',
     "redisson_sc:{<name>} {<name>}:timeout <clock> PUBLISH free",
     "{<name>}:timeout redisson_sc:{<name>} <clock> PUBLISH"},
    /* semaphore: rlock's trySetPermits takes a TTL, its release an
     * if-exists flag (0: create) */
    {"sem-extra-arg", "semaphore trySetPermits", "permit", 'c', "3 PUBLISH 0", "3 PUBLISH"},
    {"sem-extra-arg", "semaphore release", "permit", 'c', "2 PUBLISH 0", "2 PUBLISH"},
    /* a read handle's forceUnlock names the mode it may delete */
    {"rw-force-mode", "read forceUnlock", NULL, 'c', "0 PUBLISH read", "0 PUBLISH"},
    {"rw-force-mode", "write forceUnlock", NULL, 'c', "1 PUBLISH write", "1 PUBLISH"},
    /* a fair waiter that leaves the queue: rlock's queue-leave also takes
     * the lock key and channel, to wake the next waiter when the lock is
     * free (its writes when it is not: Java's ZREM and LREM) */
    {"fair-abandon-keys", "gives up", NULL, 'c',
     "EVAL 4 redisson_lock_queue:{<name>} redisson_lock_timeout:{<name>} <name> "
     "redisson_lock__channel:{<name>} <owner> 500 PUBLISH",
     "EVAL 2 redisson_lock_queue:{<name>} redisson_lock_timeout:{<name>} <owner> 500"},
    /* fenced acquire: rlock passes the token key's TTL (0: none, Java's
     * way; option fenced_token_ttl_ms) */
    {"fenced-floor", "fenced tryLock", NULL, 'c', LEASE_S " <owner> 0", LEASE_S " <owner>"},
    {"fenced-floor", "fenced re-entry", NULL, 'c', LEASE_S " <owner> 0", LEASE_S " <owner>"},
};

/* Calls one side makes and the other does not, left out of that side
 * (`side`: 'c' rlock, 'j' Java) in the operations named: lines that start
 * with `prefix` and end with `suffix`. */
typedef struct known_extra {
  const char *id, *op, *prefix, *suffix;
  char side;
} known_extra;

static const known_extra KNOWN_EXTRA[] = {
    /* a try that gave up trims the owner's count back to what the client
     * knows (0), in case a try it abandoned at the deadline landed
     * (lock_trim.lua; fair_trim.lua, rwlock_*_trim.lua) */
    {"trim-after-giving-up", "gives up", "EVAL 2 <name> ", " 0 PUBLISH 0", 'c'},
    /* a fenced acquire floors the token with the server's TIME (read, left
     * out) and stores the floor when it is above the INCR (docs/fencing.md) */
    {"fenced-floor", "fenced ", "[lua] SET redisson_lock_token:{<name>} ", "<clock>", 'c'},
    /* the local gate (issue 39): while another owner of the same rlock
     * client holds the lock, a waiting try sends no try script until that
     * owner releases; Java tries on subscribing and at its deadline */
    {"local-gate", "same client's", "EVAL 1 <name> ", " <owner>", 'j'},
};

static void apply_known_extra(const char *op, seq *j, seq *cs, char *fired, size_t n) {
  for (size_t k = 0; k < sizeof KNOWN_EXTRA / sizeof KNOWN_EXTRA[0]; k++) {
    const known_extra *r = &KNOWN_EXTRA[k];
    if (strstr(op, r->op) == NULL)
      continue;
    seq *c = r->side == 'j' ? j : cs;
    bool any = false;
    for (size_t i = 0; i < c->n;) {
      size_t len = strlen(c->line[i]), sl = strlen(r->suffix);
      if (strncmp(c->line[i], r->prefix, strlen(r->prefix)) == 0 && len >= sl &&
          strcmp(c->line[i] + len - sl, r->suffix) == 0) {
        drop_line(c, i);
        any = true;
        continue;
      }
      i++;
    }
    if (any && strstr(fired, r->id) == NULL) {
      size_t o = strlen(fired);
      snprintf(fired + o, n - o, "%s%s", o ? ", " : "", r->id);
    }
  }
}

/* Operations whose top-level script call has other arguments than Java's
 * (what the scripts write is still compared), and operations where rlock
 * writes a key Java does not (`extra` prefix: such lines are left out of
 * rlock's side). */
typedef struct known_call {
  const char *id, *op, *extra;
} known_call;

static const known_call KNOWN_CALLS[] = {
    /* permit ids: rlock passes them as one argument each, without a count */
    {"psem-args", "permit semaphore tryAcquire", NULL},
    {"psem-args", "permit semaphore tryRelease", NULL},
    /* rlock marks each semaphore acquire so that a re-send after a lost
     * reply does not take twice */
    {"sem-take-marker", "semaphore tryAcquire", "rlock_semaphore_take:"},
};

/* Replaces whole-token occurrences of `from` (one or more space-separated
 * tokens) in line; true if any. */
static bool replace_tokens(char *line, const char *from, const char *to) {
  char tmp[LINE_LEN];
  size_t fl = strlen(from), o = 0;
  bool any = false;
  for (const char *p = line; *p;) {
    bool start = p == line || p[-1] == ' ';
    if (start && strncmp(p, from, fl) == 0 && (p[fl] == ' ' || p[fl] == '\0')) {
      o += (size_t)snprintf(tmp + o, sizeof tmp - o, "%s", to);
      p += fl;
      any = true;
    } else if (o + 1 < sizeof tmp) {
      tmp[o++] = *p++;
    } else {
      p++;
    }
  }
  tmp[o < sizeof tmp ? o : sizeof tmp - 1] = '\0';
  snprintf(line, LINE_LEN, "%s", tmp);
  return any;
}

static void apply_known(const char *op, char who, seq *s, char *fired, size_t n) {
  for (size_t k = 0; k < sizeof KNOWN / sizeof KNOWN[0]; k++) {
    const known *r = &KNOWN[k];
    if (r->side != who || strstr(op, r->op) == NULL ||
        (r->not_op != NULL && strstr(op, r->not_op) != NULL))
      continue;
    bool any = false;
    for (size_t i = 0; i < s->n; i++)
      any = replace_tokens(s->line[i], r->from, r->to) || any;
    if (any && strstr(fired, r->id) == NULL) {
      size_t o = strlen(fired);
      snprintf(fired + o, n - o, "%s%s", o ? ", " : "", r->id);
    }
  }
}


static void apply_known_calls(const char *op, seq *j, seq *c, char *fired, size_t n) {
  for (size_t k = 0; k < sizeof KNOWN_CALLS / sizeof KNOWN_CALLS[0]; k++) {
    const known_call *r = &KNOWN_CALLS[k];
    if (strstr(op, r->op) == NULL || (strstr(op, "permit") != NULL) != (strstr(r->op, "permit") != NULL))
      continue;
    bool any = false;
    for (size_t i = 0; i < j->n; i++)
      if (strncmp(j->line[i], "EVAL ", 5) == 0) {
        snprintf(j->line[i], LINE_LEN, "EVAL <script call>");
        any = true;
      }
    for (size_t i = 0; i < c->n;) {
      if (r->extra != NULL && strncmp(c->line[i], "EVAL ", 5) != 0 &&
          strstr(c->line[i], r->extra) != NULL) {
        drop_line(c, i);
        any = true;
        continue;
      }
      if (strncmp(c->line[i], "EVAL ", 5) == 0)
        snprintf(c->line[i], LINE_LEN, "EVAL <script call>");
      i++;
    }
    if (any) {
      size_t o = strlen(fired);
      snprintf(fired + o, n - o, "%s%s", o ? ", " : "", r->id);
    }
  }
}

/* Compares one operation's commands, after the known differences. */
static void compare(const char *op, seq *j, seq *c) {
  char fired[256] = "";
  apply_known(op, 'j', j, fired, sizeof fired);
  apply_known(op, 'c', c, fired, sizeof fired);
  apply_known_calls(op, j, c, fired, sizeof fired);
  apply_known_extra(op, j, c, fired, sizeof fired);
  /* a script re-sent after NOSCRIPT that the rules made adjacent again */
  for (size_t i = 1; i < c->n;)
    if (strncmp(c->line[i], "[lua]", 5) != 0 && strcmp(c->line[i], c->line[i - 1]) == 0)
      drop_line(c, i);
    else
      i++;
  bool same = j->n == c->n;
  for (size_t i = 0; same && i < j->n; i++)
    same = strcmp(j->line[i], c->line[i]) == 0;
  rs_report("wire %s: %s (%zu commands%s%s)", op, same ? "same" : "DIFFERENT",
            j->n, *fired ? "; known: " : "", fired);
  if (!same) {
    show("java ", j);
    show("rlock", c);
  }
  cr_expect(same, "wire %s: rlock's commands differ from Redisson's (above)", op);
}

/* Both sides of one comparison: a session and a client, each with its own
 * object name. */
typedef struct pair {
  rs_peer *p;
  rlock_client *c;
  rs_monitor *m;
  char jname[96], cname[96], jowner[160], jid[80], cowner[160];
  uint64_t o;
  side js, cs;
  seq j, cc;
} pair;

static pair *pair_new(const char *base) {
  pair *w = calloc(1, sizeof *w);
  cr_assert(w != NULL);
  w->p = rs_connect();
  w->c = rs_client(NULL, 0);
  char b[64];
  snprintf(b, sizeof b, "%sJ", base);
  rs_name(w->jname, sizeof w->jname, b);
  snprintf(b, sizeof b, "%sC", base);
  rs_name(w->cname, sizeof w->cname, b);
  rs_owner(w->p, "A", w->jowner, sizeof w->jowner);
  snprintf(w->jid, sizeof w->jid, "%.*s", (int)(strrchr(w->jowner, ':') - w->jowner), w->jowner);
  w->o = rlock_owner_new();
  snprintf(w->cowner, sizeof w->cowner, "%s:%" PRIu64, rlock_client_id(w->c), w->o);
  w->js = (side){w->jname, w->jowner, w->jid};
  w->cs = (side){w->cname, w->cowner, rlock_client_id(w->c)};
  w->m = rs_monitor_start();
  return w;
}

static void pair_free(pair *w) {
  rs_monitor_stop(w->m);
  rlock_client_free(w->c);
  rs_close(w->p);
  free(w);
}

/* Drops what ran so far (set-up of the next operation). */
static void skip_both(pair *w) {
  take(w->m, &w->js, &w->j);
}

static void java_done(pair *w) { take(w->m, &w->js, &w->j); }

static void c_done(pair *w, const char *op) {
  take(w->m, &w->cs, &w->cc);
  compare(op, &w->j, &w->cc);
}

typedef struct cwait_arg {
  rlock *l;
  uint64_t owner;
} cwait_arg;

static int cwait_run(void *arg) {
  cwait_arg *a = arg;
  return rlock_try_lock_owner(a->l, a->owner, 10000, RS_LEASE_MS);
}

typedef struct wkind {
  const char *label, *jprefix, *cside;
  bool reentrant, wait_path;
} wkind;

static void lock_ops(const wkind *k) {
  pair *w = pair_new("w");
  char jn[160], op[160];
  snprintf(jn, sizeof jn, "%s%s", k->jprefix, w->jname);
  if (k->jprefix[0] == 'N' || k->jprefix[0] == 'Q') {
    rs_send(w->p, "A", "isLocked %s", jn);
    if (strncmp(rs_answer(w->p, "A", RS_REPLY_BOUND_MS), "ERR", 3) == 0) {
      pair_free(w);
      cr_skip_test("%s: not in Redisson %s", k->label, rs_version());
    }
  }
  rlock *l = rs_lock_kind(w->c, k->cside, w->cname);
  skip_both(w);

  rs_call(w->p, "A", "tryLock %s 0 %d", jn, RS_LEASE_MS);
  java_done(w);
  cr_assert_eq(rlock_try_lock_owner(l, w->o, 0, RS_LEASE_MS), 1);
  snprintf(op, sizeof op, "%s tryLock(0, lease)", k->label);
  c_done(w, op);

  if (k->reentrant) {
    rs_call(w->p, "A", "tryLock %s 0 %d", jn, RS_LEASE_MS);
    java_done(w);
    cr_assert_eq(rlock_try_lock_owner(l, w->o, 0, RS_LEASE_MS), 1);
    snprintf(op, sizeof op, "%s re-entry", k->label);
    c_done(w, op);
    rs_call(w->p, "A", "unlock %s", jn);
    java_done(w);
    cr_assert_eq(rlock_unlock_owner(l, w->o), 0);
    snprintf(op, sizeof op, "%s unlock (still held)", k->label);
    c_done(w, op);
  }

  rs_call(w->p, "A", "isLocked %s", jn);
  java_done(w);
  cr_assert_eq(rlock_is_locked(l), 1);
  snprintf(op, sizeof op, "%s isLocked", k->label);
  c_done(w, op);

  rs_call(w->p, "A", "unlock %s", jn);
  java_done(w);
  cr_assert_eq(rlock_unlock_owner(l, w->o), 0);
  snprintf(op, sizeof op, "%s unlock", k->label);
  c_done(w, op);

  /* a try that waits 500 ms for another's hold and gives up: subscribe,
   * retries, unsubscribe. Java's holder is another thread of its client
   * (Java tries at the server whoever holds); rlock's is another client,
   * so that rlock too goes to the server (with a holder of its own client,
   * the local gate keeps it from trying: compared once below) */
  if (k->wait_path) {
    rlock_client *c2 = rs_client(NULL, 0);
    rlock *l2 = rs_lock_kind(c2, k->cside, w->cname);
    uint64_t other = rlock_owner_new();
    rs_call(w->p, "H", "tryLock %s 0 %d", jn, RS_LEASE_MS);
    cr_assert_eq(rlock_try_lock_owner(l2, other, 0, RS_LEASE_MS), 1);
    skip_both(w);
    cr_assert_not(rs_call_bool(w->p, "A", "tryLock %s 500 %d", jn, RS_LEASE_MS));
    rs_sleep_ms(200); /* the unsubscribe follows the answer */
    java_done(w);
    cr_assert_eq(rlock_try_lock_owner(l, w->o, 500, RS_LEASE_MS), 0);
    rs_sleep_ms(200);
    snprintf(op, sizeof op, "%s tryLock(500 ms, lease) that gives up", k->label);
    c_done(w, op);
    cr_assert_eq(rlock_unlock_owner(l2, other), 0);
    rlock_free(l2);
    rlock_client_free(c2);

    /* the same, rlock's holder an owner of the same client: known
     * difference local-gate */
    if (strcmp(k->label, "lock") == 0) {
      cr_assert_eq(rlock_try_lock_owner(l, other, 0, RS_LEASE_MS), 1);
      skip_both(w);
      cr_assert_not(rs_call_bool(w->p, "A", "tryLock %s 500 %d", jn, RS_LEASE_MS));
      rs_sleep_ms(200);
      java_done(w);
      cr_assert_eq(rlock_try_lock_owner(l, w->o, 500, RS_LEASE_MS), 0);
      rs_sleep_ms(200);
      snprintf(op, sizeof op, "%s tryLock(500 ms, lease) behind the same client's other owner",
               k->label);
      c_done(w, op);
      cr_assert_eq(rlock_unlock_owner(l, other), 0);
    }
    rs_call(w->p, "H", "unlock %s", jn);
  }

  rs_call(w->p, "A", "tryLock %s 0 %d", jn, RS_LEASE_MS);
  cr_assert_eq(rlock_try_lock_owner(l, w->o, 0, RS_LEASE_MS), 1);
  skip_both(w);
  rs_call(w->p, "B", "forceUnlock %s", jn);
  java_done(w);
  cr_assert_eq(rlock_force_unlock(l), 1);
  snprintf(op, sizeof op, "%s forceUnlock", k->label);
  c_done(w, op);

  rlock_free(l);
  pair_free(w);
}

/* wait: also compare a try that waits and gives up (not for the read
 * lock: readers share, so a second reader does not wait) */
#define WIRE_KIND(id, label, jp, cside, re, wait)                             \
  Test(wire, id) {                                                            \
    static const wkind k = {label, jp, cside, re, wait};                      \
    lock_ops(&k);                                                             \
  }

WIRE_KIND(lock, "lock", "", "lock", true, true)
WIRE_KIND(fair, "fair", "F/", "fair", true, true)
WIRE_KIND(read, "read", "R/", "read", true, false)
WIRE_KIND(write, "write", "W/", "write", true, true)
WIRE_KIND(fenced, "fenced", "X/", "fenced", true, true)
WIRE_KIND(spin, "spin", "S/", "spin", true, true)
WIRE_KIND(nonreentrant, "nonreentrant", "N/", "nonreentrant", false, true)
WIRE_KIND(nonreentrant_fair, "nonreentrant fair", "Q/", "nonreentrant_fair", false, true)

/* Lines of s that start with `prefix` (and end with `suffix`, if given). */
static int count_lines(const seq *s, const char *prefix, const char *suffix) {
  int n = 0;
  for (size_t i = 0; i < s->n; i++) {
    size_t len = strlen(s->line[i]), sl = suffix ? strlen(suffix) : 0;
    if (strncmp(s->line[i], prefix, strlen(prefix)) == 0 &&
        (suffix == NULL || (len >= sl && strcmp(s->line[i] + len - sl, suffix) == 0)))
      n++;
  }
  return n;
}

/* The lock's hash after a handover to `owner`: one field, `owner`'s, count
 * 1, a TTL within the lease. */
static void assert_handed_to(const char *who, const char *name, const char *owner) {
  char *v = rs_str("HGET %s %s", name, owner);
  cr_assert(v != NULL && strcmp(v, "1") == 0, "%s: the new holder's count is %s", who,
            v ? v : "(nil)");
  free(v);
  cr_assert_eq(rs_int("HLEN %s", name), 1, "%s: more than one owner field", who);
  long long pttl = rs_int("PTTL %s", name);
  cr_assert(pttl > 0 && pttl <= RS_LEASE_MS, "%s: PTTL %lld", who, pttl);
}

/* Rule local-transfer (docs/wire-protocol.md, "Transfer"): a handover to a
 * waiter of the same client. Java's unlock runs the release script (DEL,
 * PUBLISH) and the woken thread's acquire follows; rlock's unlock is one
 * script that moves the hold (HDEL, HSET 1, PEXPIRE, the latch SET) and
 * publishes nothing - no other client is subscribed. What a Java observer
 * sees afterwards is the same on both sides: one owner field, the new
 * holder's, count 1, a TTL within its lease. The command streams are not
 * compared line by line (Java has no such script); this states the
 * difference instead. */
Test(wire, local_transfer) {
  pair *w = pair_new("wx");
  rlock *l = rs_lock_kind(w->c, "lock", w->cname);
  char jb[160], cb[160], chan[200];
  rs_owner(w->p, "B", jb, sizeof jb);
  uint64_t o2 = rlock_owner_new();
  snprintf(cb, sizeof cb, "%s:%" PRIu64, rlock_client_id(w->c), o2);

  /* Java: A holds, B waits, A unlocks */
  rs_call(w->p, "A", "lock %s %d", w->jname, RS_LEASE_MS);
  rs_send(w->p, "B", "lock %s %d", w->jname, RS_LEASE_MS);
  snprintf(chan, sizeof chan, "redisson_lock__channel:{%s}", w->jname);
  rs_wait_waiting(chan);
  skip_both(w);
  rs_call(w->p, "A", "unlock %s", w->jname);
  rs_ok(w->p, "B", RS_REPLY_BOUND_MS);
  rs_sleep_ms(200);
  java_done(w);
  static seq js; /* skip_both below takes into w->j again */
  js = w->j;
  assert_handed_to("Java", w->jname, jb);

  /* rlock: owner 1 holds, owner 2 of the same client waits, owner 1 unlocks */
  cr_assert_eq(rlock_try_lock_owner(l, w->o, 0, RS_LEASE_MS), 1);
  cwait_arg cw = {l, o2};
  rs_task t;
  rs_task_start(&t, cwait_run, &cw);
  snprintf(chan, sizeof chan, "redisson_lock__channel:{%s}", w->cname);
  rs_wait_waiting(chan);
  rs_sleep_ms(RS_SETTLE_MS);
  skip_both(w);
  take(w->m, &w->cs, &w->cc); /* drop the C side's set-up too */
  cr_assert_eq(rlock_unlock_owner(l, w->o), 0);
  cr_assert_eq(rs_task_join(&t, RS_REPLY_BOUND_MS), 1);
  rs_sleep_ms(200);
  take(w->m, &w->cs, &w->cc);
  assert_handed_to("rlock", w->cname, cb);

  int j_scripts = count_lines(&js, "EVAL ", NULL), c_scripts = count_lines(&w->cc, "EVAL ", NULL);
  int j_pub = count_lines(&js, "[lua] PUBLISH ", NULL), c_pub = count_lines(&w->cc, "[lua] PUBLISH ", NULL);
  if (j_scripts < 2 || j_pub != 1 || c_scripts != 1 || c_pub != 0 ||
      count_lines(&w->cc, "[lua] HDEL <name> <owner>", NULL) != 1 ||
      count_lines(&w->cc, "[lua] HSET <name> ", " 1") != 1 ||
      count_lines(&w->cc, "[lua] PEXPIRE <name> ", NULL) != 1) {
    fprintf(stderr, "  Java:\n");
    show("J", &js);
    fprintf(stderr, "  rlock:\n");
    show("C", &w->cc);
    cr_assert(false, "local-transfer: Java %d scripts / %d PUBLISH (want >= 2 / 1), rlock %d / %d "
            "(want 1 / 0, with HDEL, HSET 1, PEXPIRE)", j_scripts, j_pub, c_scripts, c_pub);
  }
  rs_report("wire lock handover to the same client's waiter: Java %d scripts, %d PUBLISH; "
            "rlock %d script, no PUBLISH (known: local-transfer)", j_scripts, j_pub, c_scripts);
  rs_call(w->p, "B", "unlock %s", w->jname);
  cr_assert_eq(rlock_unlock_owner(l, o2), 0);
  rlock_free(l);
  pair_free(w);
}

Test(wire, semaphore) {
  pair *w = pair_new("ws");
  rlock_semaphore *s;
  cr_assert_eq(rlock_semaphore_new(w->c, w->cname, &s), 0);
  skip_both(w);
  rs_call(w->p, "A", "semSet %s 3", w->jname);
  java_done(w);
  cr_assert_eq(rlock_semaphore_try_set_permits(s, 3, 0), 1);
  c_done(w, "semaphore trySetPermits");
  rs_call(w->p, "A", "semAcquire %s 2 0", w->jname);
  java_done(w);
  cr_assert_eq(rlock_semaphore_try_acquire(s, 2, 0), 1);
  c_done(w, "semaphore tryAcquire(2)");
  rs_call(w->p, "A", "semRelease %s 2", w->jname);
  java_done(w);
  cr_assert_eq(rlock_semaphore_release(s, 2), 0);
  c_done(w, "semaphore release(2)");
  rs_call(w->p, "A", "semAvailable %s", w->jname);
  java_done(w);
  cr_assert_eq(rlock_semaphore_available_permits(s), 3);
  c_done(w, "semaphore availablePermits");
  rlock_semaphore_free(s);
  pair_free(w);
}

Test(wire, permit_semaphore) {
  pair *w = pair_new("wp");
  rlock_permit_semaphore *s;
  cr_assert_eq(rlock_permit_semaphore_new(w->c, w->cname, &s), 0);
  skip_both(w);
  rs_call(w->p, "A", "psemSet %s 3", w->jname);
  java_done(w);
  cr_assert_eq(rlock_permit_semaphore_try_set_permits(s, 3), 1);
  c_done(w, "permit semaphore trySetPermits");
  char jids[300];
  snprintf(jids, sizeof jids, "%s", rs_call(w->p, "A", "psemAcquire %s 2 0 %d", w->jname, RS_LEASE_MS));
  java_done(w);
  char ids[2][RLOCK_PERMIT_ID_LEN + 1];
  cr_assert_eq(rlock_permit_semaphore_try_acquire_n(s, 2, 0, RS_LEASE_MS, ids), 1);
  c_done(w, "permit semaphore tryAcquire(2, 0, lease)");
  rs_call(w->p, "A", "psemRelease %s %s", w->jname, jids);
  java_done(w);
  const char *idv[] = {ids[0], ids[1]};
  cr_assert_eq(rlock_permit_semaphore_try_release_n(s, idv, 2), 2);
  c_done(w, "permit semaphore tryRelease(ids)");
  rs_call(w->p, "A", "psemAvailable %s", w->jname);
  java_done(w);
  cr_assert_eq(rlock_permit_semaphore_available_permits(s), 3);
  c_done(w, "permit semaphore availablePermits");
  rlock_permit_semaphore_free(s);
  pair_free(w);
}

Test(wire, latch) {
  pair *w = pair_new("wl");
  rlock_latch *l;
  cr_assert_eq(rlock_latch_new(w->c, w->cname, &l), 0);
  skip_both(w);
  rs_call(w->p, "A", "latchSet %s 2", w->jname);
  java_done(w);
  cr_assert_eq(rlock_latch_try_set_count(l, 2), 1);
  c_done(w, "latch trySetCount");
  rs_call(w->p, "A", "latchDown %s", w->jname);
  java_done(w);
  cr_assert_eq(rlock_latch_count_down(l), 0);
  c_done(w, "latch countDown");
  rs_call(w->p, "A", "latchCount %s", w->jname);
  java_done(w);
  cr_assert_eq(rlock_latch_count(l), 1);
  c_done(w, "latch getCount");
  rs_call(w->p, "A", "latchDown %s", w->jname);
  java_done(w);
  cr_assert_eq(rlock_latch_count_down(l), 0);
  c_done(w, "latch countDown to 0");
  rlock_latch_free(l);
  pair_free(w);
}

Test(wire, multilock) {
  pair *w = pair_new("wm");
  char jn[400], a[120], b[120];
  snprintf(jn, sizeof jn, "M/%s.a+%s.b", w->jname, w->jname);
  snprintf(a, sizeof a, "%s.a", w->cname);
  snprintf(b, sizeof b, "%s.b", w->cname);
  rlock *la, *lb;
  cr_assert_eq(rlock_new(w->c, a, &la), 0);
  cr_assert_eq(rlock_new(w->c, b, &lb), 0);
  rlock *mem[] = {la, lb};
  rlock *ml;
  cr_assert_eq(rlock_new_multilock(mem, 2, &ml), 0);
  skip_both(w);
  rs_call(w->p, "A", "tryLock %s 1000 %d", jn, RS_LEASE_MS);
  java_done(w);
  cr_assert_eq(rlock_try_lock_owner(ml, w->o, 1000, RS_LEASE_MS), 1);
  c_done(w, "multi: MultiLock tryLock(wait, lease)");
  rs_call(w->p, "A", "unlock %s", jn);
  java_done(w);
  cr_assert_eq(rlock_unlock_owner(ml, w->o), 0);
  c_done(w, "multi: MultiLock unlock");
  rlock_free(ml);
  rlock_free(la);
  rlock_free(lb);
  pair_free(w);
}

Test(wire, faster_multilock) {
  pair *w = pair_new("wf");
  char jn[300];
  snprintf(jn, sizeof jn, "G/%s=Jack_001,Mary_002", w->jname);
  const char *vals[] = {"Jack_001", "Mary_002"};
  rlock *f;
  cr_assert_eq(rlock_new_fast_multilock(w->c, w->cname, vals, NULL, 2, &f), 0);
  skip_both(w);
  rs_call(w->p, "A", "tryLock %s 0 %d", jn, RS_LEASE_MS);
  java_done(w);
  cr_assert_eq(rlock_try_lock_owner(f, w->o, 0, RS_LEASE_MS), 1);
  c_done(w, "FasterMultiLock tryLock(0, lease)");
  rs_call(w->p, "A", "unlock %s", jn);
  java_done(w);
  cr_assert_eq(rlock_unlock_owner(f, w->o), 0);
  c_done(w, "FasterMultiLock unlock");
  rlock_free(f);
  pair_free(w);
}
