/* One name described as JSON: the object `rlock status --json` writes for
 * each NAME and `rlock ls --json` for each entry, from one writer so both
 * give the same fields with the same values for the same key. The kind's
 * name and words come from the public registry (RLOCK_INFO_KIND_MAP). */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"

/* The registry's name and words of each kind, indexed by its value. */
static const struct {
  const char *name, *words;
} info_kinds[] = {
#define KIND_ROW(id, value, name, words) [value] = {name, words},
    RLOCK_INFO_KIND_MAP(KIND_ROW)
#undef KIND_ROW
};

static bool known(rlock_info_kind kind) {
  return (size_t)kind < sizeof info_kinds / sizeof info_kinds[0] &&
         info_kinds[kind].name != NULL;
}

const char *cli_info_kind_name(rlock_info_kind kind) {
  return known(kind) ? info_kinds[kind].name : "foreign";
}

const char *cli_info_kind_words(rlock_info_kind kind) {
  return known(kind) ? info_kinds[kind].words : "not a lock";
}

bool cli_election_of(rlock_client *client, const char *name,
                     const rlock_info *info, rlock_election_state *st) {
  rlock_election_state_init(st);
  return info->kind == RLOCK_INFO_FENCED &&
         rlock_client_election_leader(client, name, st) == 0 && st->has_value;
}

/* An owner "<client id>:<thread id>" (a writer's with ":write") split into
 * its parts; false when the field is not of that form. */
bool cli_owner_parts(const rlock_info_entry *e, bool writer,
                     size_t *client_len, const char **thread,
                     size_t *thread_len) {
  size_t len = e->key_len - (writer ? 6 : 0);
  const char *colon = NULL;
  for (size_t i = len; i-- > 0;)
    if (e->key[i] == ':') {
      colon = e->key + i;
      break;
    }
  if (colon == NULL || colon == e->key || colon + 1 == e->key + len)
    return false;
  for (const char *c = colon + 1; c < e->key + len; c++)
    if (*c < '0' || *c > '9')
      return false;
  *client_len = (size_t)(colon - e->key);
  *thread = colon + 1;
  *thread_len = (size_t)(e->key + len - colon - 1);
  return true;
}

void cli_field_text(const rlock_info_entry *e) {
  fputs("  field ", stdout);
  cli_text_write(stdout, e->key, e->key_len);
  fputs(" = ", stdout);
  cli_text_write(stdout, e->value, e->value_len);
  fputc('\n', stdout);
}

void cli_group_hold_text(const rlock_info_entry *e) {
  fputs("  value field ", stdout);
  cli_text_write(stdout, e->value, e->value_len);
  fputs(": held by ", stdout);
  cli_text_write(stdout, e->key, e->key_len);
  printf(" (count %" PRId64, e->count);
  if (e->ttl_ms >= 0)
    printf(", expires in %" PRId64 " ms)\n", e->ttl_ms);
  else
    printf(", expired %" PRId64 " ms ago, cleared at the next acquire)\n",
           -e->ttl_ms);
}

static void json_owner(const rlock_info_entry *e, bool writer) {
  size_t cl, tl;
  const char *t;
  fputs("\"owner\":", stdout);
  cli_json_string(stdout, e->key, e->key_len - (writer ? 6 : 0));
  if (cli_owner_parts(e, writer, &cl, &t, &tl)) {
    fputs(",\"client\":", stdout);
    cli_json_string(stdout, e->key, cl);
    printf(",\"thread\":%.*s", (int)tl, t);
  }
}

static void json_int_or_null(const char *field, bool has, int64_t v) {
  if (has)
    printf(",\"%s\":%" PRId64, field, v);
  else
    printf(",\"%s\":null", field);
}

void cli_info_json(const char *name, size_t name_len, const rlock_info *info,
                   const rlock_election_state *election, cli_whois *w) {
  fputs("{\"name\":", stdout);
  cli_json_string(stdout, name, name_len);
  printf(",\"kind\":\"%s\",\"type\":", cli_info_kind_name(info->kind));
  cli_json_string(stdout, info->type, strlen(info->type));
  printf(",\"locked\":%s", info->locked ? "true" : "false");
  /* null: no expiry (no TTL, or no key: see type) */
  json_int_or_null("ttl_ms", info->ttl_ms >= 0, info->ttl_ms);
  fputs(",\"mode\":", stdout);
  if (info->mode != NULL)
    cli_json_string(stdout, info->mode, strlen(info->mode));
  else
    fputs("null", stdout);
  /* the hash's fields: holders with their count, a foreign field with its
   * value; a FasterMultiLock group's held values with their owner */
  fputs(",\"holders\":[", stdout);
  for (size_t i = 0; i < info->holders_n; i++) {
    const rlock_info_entry *h = &info->holders[i];
    fputs(i > 0 ? ",{" : "{", stdout);
    if (h->count == RLOCK_INFO_NOT_A_COUNT) {
      fputs("\"field\":", stdout);
      cli_json_string(stdout, h->key, h->key_len);
      fputs(",\"value\":", stdout);
      cli_json_string(stdout, h->value, h->value_len);
    } else {
      json_owner(h, h->writer);
      printf(",\"count\":%" PRId64 ",\"writer\":%s", h->count,
             h->writer ? "true" : "false");
      /* a group's held value: its field, and ms until its holder's expiry
       * (negative: passed) */
      if (info->kind == RLOCK_INFO_FAST_MULTILOCK) {
        fputs(",\"field\":", stdout);
        cli_json_string(stdout, h->value, h->value_len);
        printf(",\"ttl_ms\":%" PRId64, h->ttl_ms);
      }
      const cli_whois_entry *e = cli_whois_get(w, name, h->key, h->key_len);
      if (e != NULL)
        cli_whois_json(stdout, e);
    }
    fputc('}', stdout);
  }
  printf("],\"queue\":{\"length\":%zu,\"head\":", info->queue_total);
  if (info->queue_n > 0) {
    fputc('{', stdout);
    json_owner(&info->queue[0], false);
    if (info->queue[0].ttl_ms != RLOCK_INFO_NO_EXPIRY)
      printf(",\"deadline_ms\":%" PRId64, info->queue[0].ttl_ms);
    fputs("}}", stdout);
  } else {
    fputs("null}", stdout);
  }
  json_int_or_null("token", info->token >= 0, info->token);
  bool permits = info->kind == RLOCK_INFO_PERMIT_SEMAPHORE;
  json_int_or_null("count", info->kind == RLOCK_INFO_COUNT, info->count);
  json_int_or_null("permits_available", permits, info->count);
  json_int_or_null("permits_taken", permits, (int64_t)info->permits_total);
  /* the taken permits, soonest expiry first: lease_ms null, no lease */
  if (permits) {
    fputs(",\"permits\":[", stdout);
    for (size_t i = 0; i < info->permits_n; i++) {
      const rlock_info_entry *p = &info->permits[i];
      fputs(i > 0 ? ",{\"id\":" : "{\"id\":", stdout);
      cli_json_string(stdout, p->key, p->key_len);
      json_int_or_null("lease_ms", p->ttl_ms != RLOCK_INFO_NO_EXPIRY,
                       p->ttl_ms);
      fputc('}', stdout);
    }
    fputc(']', stdout);
  } else {
    fputs(",\"permits\":null", stdout);
  }
  printf(",\"waiters\":%" PRId64 ",\"election\":", info->waiters);
  if (election != NULL) {
    printf("{\"term\":%" PRId64 ",\"value\":", election->term);
    cli_json_string(stdout, election->value, election->value_len);
    fputc('}', stdout);
  } else {
    fputs("null", stdout);
  }
  fputc('}', stdout);
}
