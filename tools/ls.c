/* `rlock ls [PATTERN]`: every lock, semaphore and latch whose name matches,
 * with what rlock_client_info() reads for it. The names come from the
 * library's scan (rlock_scan_*: SCAN with MATCH and COUNT on every master,
 * side keys folded into their name), so this file knows no key layout. A
 * name whose value is no lock (another Redis type, a hash of foreign
 * fields) or that is gone by the time it is read is skipped with a note.
 * --limit bounds the names read (one round trip each); the scan itself
 * costs the server COUNT keys per round trip, never a KEYS. */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

#define DEFAULT_LIMIT 1000
#define SCAN_COUNT 1000

static void human_owner(const rlock_info_entry *e, bool writer) {
  size_t cl, tl;
  const char *t;
  int len = (int)(e->key_len - (writer ? 6 : 0));
  cli_text_write(stdout, e->key, (size_t)len);
  if (cli_owner_parts(e, writer, &cl, &t, &tl)) {
    fputs(" (client ", stdout);
    cli_text_write(stdout, e->key, cl);
    printf(", thread %.*s)", (int)tl, t);
  }
}

/* The value is bytes a candidate chose: escaped as everything from Redis
 * (out.c). */
static void print_election(const rlock_election_state *st) {
  fputs("  election leader ", stdout);
  cli_text_write(stdout, st->value, st->value_len);
  printf(", term %" PRId64 "\n", st->term);
}

static void print_human(const char *name, size_t name_len,
                        const rlock_info *info, cli_whois *w) {
  cli_text_write(stdout, name, name_len);
  printf(": %s", cli_info_kind_words(info->kind));
  if (info->mode != NULL) {
    fputs(" (", stdout);
    cli_text(stdout, info->mode);
    fputs(" mode)", stdout);
  }
  if (info->kind == RLOCK_INFO_COUNT)
    printf(", count %" PRId64, info->count);
  if (info->kind == RLOCK_INFO_PERMIT_SEMAPHORE)
    printf(", %" PRId64 " available, %zu taken", info->count,
           info->permits_total);
  if (info->token >= 0)
    printf(", token %" PRId64, info->token);
  if (info->kind != RLOCK_INFO_COUNT &&
      info->kind != RLOCK_INFO_PERMIT_SEMAPHORE)
    printf(", %s", info->locked ? "locked" : "unlocked");
  if (info->kind == RLOCK_INFO_FENCED && strcmp(info->type, "none") == 0)
    fputs(" (token key only)", stdout);
  if (info->ttl_ms >= 0)
    printf(", ttl %" PRId64 " ms", info->ttl_ms);
  else if (info->ttl_ms == -1)
    fputs(", no ttl", stdout);
  printf(", %" PRId64 " waiting\n", info->waiters);
  for (size_t i = 0; i < info->holders_n; i++) {
    const rlock_info_entry *h = &info->holders[i];
    if (h->count == RLOCK_INFO_NOT_A_COUNT) { /* a foreign field */
      cli_field_text(h);
      continue;
    }
    if (info->kind == RLOCK_INFO_FAST_MULTILOCK) {
      cli_group_hold_text(h);
    } else {
      printf("  %s ", h->writer            ? "writer"
                      : info->mode != NULL ? "reader"
                                           : "holder");
      human_owner(h, h->writer);
      printf(", count %" PRId64 "\n", h->count);
    }
    const cli_whois_entry *e = cli_whois_get(w, name, h->key, h->key_len);
    if (e != NULL) {
      fputs("    ", stdout);
      cli_whois_text(stdout, e);
      fputc('\n', stdout);
    }
  }
  if (info->queue_total > 0) {
    printf("  queue %zu", info->queue_total);
    if (info->queue_n > 0) {
      fputs(", head ", stdout);
      human_owner(&info->queue[0], false);
      if (info->queue[0].ttl_ms != RLOCK_INFO_NO_EXPIRY)
        printf(", deadline in %" PRId64 " ms", info->queue[0].ttl_ms);
    }
    fputc('\n', stdout);
  }
}

enum { OPT_LIMIT = 256 };

static const struct option ls_longopts[] = {
    {"json", no_argument, NULL, 'j'},
    {"limit", required_argument, NULL, OPT_LIMIT},
    {"uri", required_argument, NULL, 'u'},
    {"help", no_argument, NULL, 'h'},
    CLI_TLS_LONGOPTS,
    CLI_SENTINEL_LONGOPTS,
    {NULL, 0, NULL, 0},
};

/* A skipped name: why, for the note and --json. */
typedef struct skipped {
  char *name;
  size_t name_len;
  char type[16]; /* Redis's TYPE; "nul" for a name with a NUL byte */
} skipped;

int cli_ls_main(int argc, char **argv) {
  const char *uri_flag = NULL;
  cli_tls_opts tls = {0};
  cli_sentinel_opts sentinel = {0};
  bool json = false;
  long long limit = DEFAULT_LIMIT;
  int c;
  optind = 1;
  while ((c = getopt_long(argc, argv, ":u:jh", ls_longopts, NULL)) != -1) {
    switch (c) {
    case 'u':
      uri_flag = cli_take_uri(optarg);
      break;
    case 'j':
      json = true;
      break;
    case OPT_LIMIT: {
      char *end = NULL;
      errno = 0;
      limit = strtoll(optarg, &end, 10);
      if (errno != 0 || end == optarg || *end != '\0' || limit < 1 ||
          limit > 1000000) {
        cli_err("ls: --limit takes a number of names from 1 to 1000000, "
                "not '%s'", optarg);
        return CLI_EX_USAGE;
      }
      break;
    }
    case 'h':
      cli_help(stdout);
      return 0;
    default:
      if (cli_tls_option(&tls, c, optarg) ||
          cli_sentinel_option(&sentinel, c, optarg) ||
          cli_uri_file_option(c, optarg))
        break;
      return cli_getopt_error(c, argv);
    }
  }
  if (argc - optind > 1) {
    cli_err("ls: one PATTERN at most (quote it: the shell expands *)");
    return CLI_EX_USAGE;
  }
  const char *pattern = optind < argc ? argv[optind] : "*";
  rlock_client *client;
  int rc = cli_connect(uri_flag, &tls, &sentinel, NULL, &client);
  if (rc != 0)
    return rc;
  static cli_whois whois; /* ~15 KB: not on the stack */
  whois.client = client;
  rlock_scan_options so;
  rlock_scan_options_init(&so);
  so.pattern = pattern;
  so.count = SCAN_COUNT;
  rlock_scan *scan = NULL;
  int err = rlock_scan_new(client, &so, &scan);
  skipped *skips = NULL;
  size_t nskips = 0, listed = 0;
  long long names = 0;
  bool cut = false;
  if (json && err == 0)
    fputs("{\"locks\":[", stdout);
  while (err == 0) {
    const char *name;
    size_t name_len = 0;
    int more = rlock_scan_next(scan, &name, &name_len);
    if (more <= 0) {
      err = more;
      break;
    }
    if (names == limit) {
      cut = true;
      break;
    }
    names++;
    rlock_info info;
    rlock_info_init(&info);
    /* A name with a NUL byte cannot be given to the library (a C string):
     * skipped, as "nul". */
    bool nul = memchr(name, '\0', name_len) != NULL;
    err = nul ? 0 : rlock_client_info(client, name, &info);
    if (err < 0) {
      char what[96];
      snprintf(what, sizeof what, "reading '%.80s'", name);
      fflush(stdout);
      cli_err_rlock(err, what);
      rc = cli_exit_for(err);
      err = 1; /* reported */
      break;
    }
    if (nul || info.kind == RLOCK_INFO_NONE ||
        info.kind == RLOCK_INFO_FOREIGN) {
      /* another Redis type, a hash of foreign fields, or gone since */
      skipped *grown = realloc(skips, (nskips + 1) * sizeof(*skips));
      char *copy = malloc(name_len + 1);
      if (copy != NULL) {
        memcpy(copy, name, name_len);
        copy[name_len] = '\0';
      }
      if (grown == NULL || copy == NULL) {
        free(grown == NULL ? NULL : copy);
        if (grown != NULL)
          skips = grown;
        rlock_info_free(&info);
        cli_err("out of memory");
        rc = CLI_EX_OSERR;
        err = 1;
        break;
      }
      skips = grown;
      skips[nskips].name = copy;
      skips[nskips].name_len = name_len;
      snprintf(skips[nskips].type, sizeof skips[nskips].type, "%s",
               nul ? "nul" : info.type);
      nskips++;
    } else {
      rlock_election_state st;
      bool elected = cli_election_of(client, name, &info, &st);
      if (json) {
        fputs(listed == 0 ? "\n    " : ",\n    ", stdout);
        cli_info_json(name, name_len, &info, elected ? &st : NULL, &whois);
      } else {
        print_human(name, name_len, &info, &whois);
        if (elected)
          print_election(&st);
      }
      listed++;
    }
    rlock_info_free(&info);
  }
  if (err < 0) {
    fflush(stdout);
    cli_err_rlock(err, "scanning the keyspace");
    rc = cli_exit_for(err);
  }
  if (json && rc == 0) {
    fputs(listed > 0 ? "\n  ],\n  \"skipped\":[" : "],\n  \"skipped\":[",
          stdout);
    for (size_t i = 0; i < nskips; i++) {
      fputs(i > 0 ? ",{\"name\":" : "{\"name\":", stdout);
      cli_json_string(stdout, skips[i].name, skips[i].name_len);
      printf(",\"type\":\"%s\"}", skips[i].type);
    }
    printf("],\n  \"cut\":%s,\"limit\":%lld}\n", cut ? "true" : "false",
           limit);
  }
  fflush(stdout);
  for (size_t i = 0; i < nskips; i++) {
    if (!json && rc == 0) {
      /* the name escaped here (cli_err would stop at a NUL) */
      fputs(CLI_PROG ": ls: skipped '", stderr);
      cli_text_write(stderr, skips[i].name, skips[i].name_len);
      if (strcmp(skips[i].type, "nul") == 0)
        fputs("': the name holds a NUL byte, which rlock cannot name\n",
              stderr);
      else if (strcmp(skips[i].type, "none") == 0)
        fputs("': nothing there any more (deleted since the scan, or a "
              "foreign value under a lock's side key)\n",
              stderr);
      else
        fprintf(stderr, "': not a lock (Redis type %s%s)\n", skips[i].type,
                strcmp(skips[i].type, "hash") == 0
                    ? " with fields no lock writes"
                    : "");
    }
    free(skips[i].name);
  }
  free(skips);
  if (cut && rc == 0)
    cli_err("ls: stopped at --limit %lld names; more match (narrow PATTERN "
            "or raise --limit)",
            limit);
  rlock_scan_free(scan);
  rlock_client_free(client);
  if (fflush(stdout) != 0 && rc == 0) {
    cli_err("writing the list: %s", strerror(errno));
    rc = CLI_EX_OSERR;
  }
  return rc;
}
