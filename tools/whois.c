/* Who holds it (tools/cli.h): the rlock client behind an owner, through
 * rlock_client_holder, for status, ls and run.c; remembered per client id
 * for one run. Calls out.c and the library. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"

const cli_whois_entry *cli_whois_get(cli_whois *w, const char *name,
                                     const char *owner, size_t len) {
  static cli_whois_entry none;
  if (len <= RLOCK_ID_LEN || owner[RLOCK_ID_LEN] != ':')
    return NULL;
  for (size_t i = 0; i < w->n; i++)
    if (memcmp(w->cache[i].id, owner, RLOCK_ID_LEN) == 0)
      return &w->cache[i];
  cli_whois_entry *e = w->n < CLI_WHOIS_CACHE ? &w->cache[w->n++] : &none;
  memset(e, 0, sizeof *e);
  memcpy(e->id, owner, RLOCK_ID_LEN);
  if (w->refused) {
    e->rc = RLOCK_ENOPERM;
    snprintf(e->why, sizeof e->why, "%s", w->refused_why);
    return e;
  }
  char own[RLOCK_ID_LEN + 3];
  snprintf(own, sizeof own, "%.*s:0", RLOCK_ID_LEN, owner);
  rlock_holder_init(&e->h);
  e->rc = rlock_client_holder(w->client, name, own, &e->h);
  if (e->rc == 0)
    snprintf(e->why, sizeof e->why, "no connection named by an rlock client "
                                    "with this id: a Java client, one with "
                                    "its own client_name, or gone");
  else if (e->rc < 0)
    snprintf(e->why, sizeof e->why, "%s: %s", rlock_strerror(e->rc),
             rlock_last_error());
  if (e->rc == RLOCK_ENOPERM) {
    w->refused = true;
    snprintf(w->refused_why, sizeof w->refused_why,
             "CLIENT LIST refused (%s); the ACL needs +client|list",
             rlock_last_error());
    snprintf(e->why, sizeof e->why, "%s", w->refused_why);
  }
  return e;
}

void cli_whois_text(FILE *out, const cli_whois_entry *e) {
  char text[512];
  if (e->rc == 1)
    snprintf(text, sizeof text,
             "pid %" PRId64 " (%s) on %s, connected for %" PRId64
             " s, from %s",
             e->h.pid, e->h.program, e->h.host, e->h.connected_ms / 1000,
             e->h.addr);
  else
    snprintf(text, sizeof text, "not known as an rlock client (%s)", e->why);
  cli_text(out, text);
}

void cli_whois_json(FILE *out, const cli_whois_entry *e) {
  if (e->rc != 1) {
    fputs(",\"rlock_client\":false,\"why\":", out);
    cli_json_string(out, e->why, strlen(e->why));
    return;
  }
  fputs(",\"rlock_client\":true,\"host\":", out);
  cli_json_string(out, e->h.host, strlen(e->h.host));
  fprintf(out, ",\"pid\":%" PRId64 ",\"program\":", e->h.pid);
  cli_json_string(out, e->h.program, strlen(e->h.program));
  fprintf(out, ",\"connected_ms\":%" PRId64 ",\"addr\":",
          e->h.connected_ms);
  cli_json_string(out, e->h.addr, strlen(e->h.addr));
}
