/* configcheck/collect_env.c - env.json: every environment variable, with the
 * values of names that look secret (and URLs carrying a password) replaced
 * by a salted SHA-256 so equality can still be checked without storing them. */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "cc_internal.h"

extern char **environ;

/* Fixed per pack format: equal values give equal hashes across packs (so the
 * compare can still say "same" or "different"); the trade-off is that a weak
 * secret can be guessed by hashing candidates with this public salt. */
#define MASK_SALT "nprobe-config-check/1/env-mask/6d1f0c2a"

/* Substrings of an upper-cased name that mark a secret. */
static const char *const secret_parts[] = {
    "KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "PASSPHRASE", "CREDENTIAL",
    "AUTH", "PRIVATE", "COOKIE", "SESSION", "SIGNATURE", "CONNECTION_STRING",
    "JWT", "SSHPASS", "BEARER",
};
/* Whole '_'-separated words of a name that mark a secret ("PWD" alone or
 * as OLDPWD is the working directory, not a password: whole words only,
 * so MYSQL_PWD is one and PWD is not). */
static const char *const secret_words[] = {"PAT", "PW", "PASS", "DSN", "CREDS", "SAS", "PWD"};

int np_cc_name_is_secret(const char *name)
{
    char up[256];
    size_t n = strlen(name);
    if (n >= sizeof up)
        n = sizeof up - 1;
    for (size_t i = 0; i < n; i++)
        up[i] = (char)toupper((unsigned char)name[i]);
    up[n] = '\0';
    for (size_t i = 0; i < sizeof secret_parts / sizeof secret_parts[0]; i++)
        if (strstr(up, secret_parts[i]))
            return 1;
    if (strcmp(up, "PWD") == 0 || strcmp(up, "OLDPWD") == 0)
        return 0;
    for (size_t i = 0; i < sizeof secret_words / sizeof secret_words[0]; i++) {
        size_t w = strlen(secret_words[i]);
        for (const char *p = strstr(up, secret_words[i]); p; p = strstr(p + 1, secret_words[i])) {
            int start = p == up || p[-1] == '_';
            int end = p[w] == '\0' || p[w] == '_';
            if (start && end)
                return 1;
        }
    }
    return 0;
}

/* Query or option keys whose value is a secret ("...?access_token=...",
 * "password=..."); matched case-insensitively before a '='. */
static const char *const secret_value_keys[] = {"token", "password", "passwd", "pwd", "secret",
                                                "key", "sig", "signature", "auth"};

/* Does value v carry a secret whatever its variable's name: a URL with
 * user:password@ (anywhere in the value, several URLs included; a password
 * may hold '/' or ':'), a key=value pair of secret_value_keys, or a JSON Web
 * Token ("eyJ" + two '.'-separated parts)? Over-masking costs only a hash. */
int np_cc_value_is_secret(const char *v)
{
    for (const char *s = strstr(v, "://"); s; s = strstr(s + 1, "://")) {
        const char *start = s + 3;
        size_t n = strcspn(start, " \t,;");
        const char *at = memchr(start, '@', n);
        const char *colon = memchr(start, ':', n);
        if (at && colon && colon < at)
            return 1;
    }
    for (const char *eq = strchr(v, '='); eq; eq = strchr(eq + 1, '=')) {
        const char *b = eq;
        while (b > v && (isalnum((unsigned char)b[-1]) || b[-1] == '_' || b[-1] == '-'))
            b--;
        size_t n = (size_t)(eq - b);
        for (size_t i = 0; i < sizeof secret_value_keys / sizeof secret_value_keys[0]; i++) {
            size_t k = strlen(secret_value_keys[i]);
            /* the key ends with a secret word: token=, access_token=, api-key= */
            if (n >= k && strncasecmp(eq - k, secret_value_keys[i], k) == 0 &&
                (n == k || !isalnum((unsigned char)eq[-(long)k - 1])) && eq[1])
                return 1;
        }
    }
    const char *jwt = strstr(v, "eyJ");
    if (jwt) {
        const char *d1 = strchr(jwt, '.');
        const char *d2 = d1 ? strchr(d1 + 1, '.') : NULL;
        if (d1 && d2 && d1 - jwt > 8 && d2 - d1 > 8)
            return 1;
    }
    return 0;
}

static int cmp_entry(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

void np_cc_mask_value(char out[72], const char *value)
{
    np_sha256 s;
    unsigned char d[32];
    np_sha256_init(&s);
    np_sha256_update(&s, MASK_SALT, strlen(MASK_SALT));
    np_sha256_update(&s, value, strlen(value));
    np_sha256_final(&s, d);
    memcpy(out, "sha256:", 7);
    np_cc_digest_hex(out + 7, d);
}

json_t *np_cc_collect_env(void)
{
    json_t *doc = json_object(), *vars = json_object(), *masked = json_array();
    if (!doc || !vars || !masked)
        goto fail;
    /* names in sorted order so the masked list is stable */
    size_t count = 0;
    for (char **e = environ; e && *e; e++)
        count++;
    char **env = malloc((count ? count : 1) * sizeof *env);
    if (!env)
        goto fail;
    memcpy(env, environ, count * sizeof *env);
    qsort(env, count, sizeof *env, cmp_entry);
    for (size_t ei = 0; ei < count; ei++) {
        char **e = &env[ei];
        const char *eq = strchr(*e, '=');
        if (!eq || eq == *e)
            continue;
        size_t n = (size_t)(eq - *e);
        char *name = malloc(n + 1);
        if (!name) {
            free(env);
            goto fail;
        }
        memcpy(name, *e, n);
        name[n] = '\0';
        const char *value = eq + 1;
        json_t *jv;
        if (np_cc_name_is_secret(name) || np_cc_value_is_secret(value)) {
            char h[72];
            np_cc_mask_value(h, value);
            jv = json_string(h);
            json_array_append_new(masked, json_string(name));
        } else {
            jv = json_string(value);
            if (!jv) /* not UTF-8: keep a hash so equality is still checked */
            {
                char h[72];
                np_cc_mask_value(h, value);
                jv = json_string(h);
            }
        }
        int bad = !jv || json_object_set_new(vars, name, jv) != 0;
        free(name);
        if (bad) {
            free(env);
            goto fail;
        }
    }
    free(env);
    json_t *masking = json_pack("{s:s, s:s, s:o}", "algorithm",
                                "sha256(fixed per-format salt || value)",
                                "salt_id", "nprobe-config-check/1", "masked", masked);
    masked = NULL;
    if (!masking || json_object_set_new(doc, "masking", masking) ||
        json_object_set_new(doc, "variables", vars)) {
        vars = NULL;
        goto fail;
    }
    return doc;
fail:
    json_decref(doc);
    json_decref(vars);
    json_decref(masked);
    return NULL;
}
