/* What the CLI prints that came from Redis (key names, owners, field
 * values, server error text): escaped so that no byte a key's writer chose
 * reaches an operator's terminal as a control sequence or a forged line,
 * and JSON that stays valid UTF-8 whatever the bytes are. docs/cli.md
 * ("Output: escaping") describes both forms.
 *
 * Text (cli_text_write):
 *   printable ASCII as is, backslash as \\, newline \n, CR \r, tab \t,
 *   every other C0 byte and DEL as \xHH; a valid UTF-8 character as is,
 *   except C1 controls (U+0080..U+009F), the line and paragraph separators
 *   and the bidirectional controls (U+200E, U+200F, U+202A..U+202E,
 *   U+2066..U+2069), written \uHHHH; a byte that is not part of valid UTF-8
 *   as \xHH.
 * JSON (cli_json_string):
 *   the JSON escapes for '"', '\\' and control characters; the same
 *   characters as above as \uHHHH (the same string, escaped); a byte that
 *   is not part of valid UTF-8 as \udcHH, the lone low surrogate Python's
 *   "surrogateescape" error handler uses (PEP 383): the document is ASCII
 *   there, json.loads() reads it, and
 *   s.encode("utf-8", "surrogateescape") gives the exact bytes back. Valid
 *   UTF-8 never encodes a surrogate, so the form is unambiguous. */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

/* Length of the valid UTF-8 sequence at s (1..4), its code point in *cp;
 * 0 when s does not start one (a stray continuation byte, an overlong
 * form, a surrogate, past U+10FFFF, or cut short). */
static size_t utf8_next(const unsigned char *s, size_t len, uint32_t *cp) {
  unsigned char b = s[0];
  size_t n;
  uint32_t c, min;
  if (b < 0x80) {
    *cp = b;
    return 1;
  } else if (b >= 0xc2 && b <= 0xdf) {
    n = 2, c = b & 0x1f, min = 0x80;
  } else if (b >= 0xe0 && b <= 0xef) {
    n = 3, c = b & 0x0f, min = 0x800;
  } else if (b >= 0xf0 && b <= 0xf4) {
    n = 4, c = b & 0x07, min = 0x10000;
  } else {
    return 0;
  }
  if (len < n)
    return 0;
  for (size_t i = 1; i < n; i++) {
    if ((s[i] & 0xc0) != 0x80)
      return 0;
    c = (c << 6) | (s[i] & 0x3f);
  }
  if (c < min || c > 0x10ffff || (c >= 0xd800 && c <= 0xdfff))
    return 0;
  *cp = c;
  return n;
}

/* A character that moves the cursor, changes the terminal's state or the
 * order text is shown in, once decoded: written escaped. */
static bool risky(uint32_t cp) {
  return cp < 0x20 || cp == 0x7f || (cp >= 0x80 && cp <= 0x9f) ||
         cp == 0x200e || cp == 0x200f || cp == 0x2028 || cp == 0x2029 ||
         (cp >= 0x202a && cp <= 0x202e) || (cp >= 0x2066 && cp <= 0x2069);
}

void cli_text_write(FILE *out, const char *text, size_t len) {
  const unsigned char *s = (const unsigned char *)text;
  for (size_t i = 0; i < len;) {
    uint32_t cp;
    size_t n = utf8_next(s + i, len - i, &cp);
    if (n == 0) {
      fprintf(out, "\\x%02x", s[i]);
      i++;
      continue;
    }
    if (cp == '\\')
      fputs("\\\\", out);
    else if (cp == '\n')
      fputs("\\n", out);
    else if (cp == '\r')
      fputs("\\r", out);
    else if (cp == '\t')
      fputs("\\t", out);
    else if (cp < 0x20 || cp == 0x7f)
      fprintf(out, "\\x%02x", (unsigned)cp);
    else if (risky(cp))
      fprintf(out, "\\u%04x", (unsigned)cp);
    else
      fwrite(s + i, 1, n, out);
    i += n;
  }
}

void cli_text(FILE *out, const char *s) { cli_text_write(out, s, strlen(s)); }

char *cli_text_dup(const char *text, size_t len) {
  char *buf = NULL;
  size_t size = 0;
  FILE *f = open_memstream(&buf, &size);
  if (f == NULL)
    return NULL;
  cli_text_write(f, text, len);
  if (fclose(f) != 0) {
    free(buf);
    return NULL;
  }
  return buf;
}

void cli_json_string(FILE *out, const char *text, size_t len) {
  const unsigned char *s = (const unsigned char *)text;
  fputc('"', out);
  for (size_t i = 0; i < len;) {
    uint32_t cp;
    size_t n = utf8_next(s + i, len - i, &cp);
    if (n == 0) {
      fprintf(out, "\\udc%02x", s[i]);
      i++;
      continue;
    }
    if (cp == '"')
      fputs("\\\"", out);
    else if (cp == '\\')
      fputs("\\\\", out);
    else if (cp == '\n')
      fputs("\\n", out);
    else if (cp == '\r')
      fputs("\\r", out);
    else if (cp == '\t')
      fputs("\\t", out);
    else if (risky(cp))
      fprintf(out, "\\u%04x", (unsigned)cp);
    else
      fwrite(s + i, 1, n, out);
    i += n;
  }
  fputc('"', out);
}
