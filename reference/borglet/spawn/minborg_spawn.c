/* minborg-spawn: become one task's process: in its cgroups, under its limits, as its job user.
 *
 * The borglet execs this program (vfork, an EMPTY environment: no loader variable, tunable or
 * locale reaches it while it is root) and it, in this order:
 *
 *   1. writes its own pid into DIR/cgroup.procs for each -c DIR (the task's cgroup v1 groups),
 *   2. sets RLIMIT_AS to -a BYTES (soft and hard) if asked,
 *   3. with -u UID -g GID: clears its supplementary groups, sets every gid then every uid
 *      (real, effective, saved) and checks that they took; root's capabilities go with uid 0,
 *   4. enters -d DIR, now checked as the user,
 *   5. reads the job's environment from fd -e ENVFD (NAME=VALUE entries, each ended by a NUL),
 *   6. execs the program after `--` with it, looked up on that environment's PATH as the user
 *      (as CPython's subprocess does: the first error other than ENOENT/ENOTDIR is reported).
 *
 * The same pid becomes the task: the borglet is its parent and reaps it. No step runs the
 * job's input as root: the environment is read and the program, its directory and PATH are
 * touched only after step 3. On failure it writes "STEP ERRNO[ DETAIL]\n" to fd -s STATUSFD
 * (close-on-exec: it reads empty after a successful exec) and exits 127, having run nothing.
 *
 * Built static where the C library allows (reference/borglet/spawn/build.sh); see
 * reference/borglet/spawner.py for the borglet's side and docs/decisions.md for why.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#define MAX_CGROUPS 16
#define DEFAULT_PATH "/bin:/usr/bin" /* CPython's os.defpath, for an environment without PATH */

static int status_fd = -1;

/* Say which step failed and why, then exit without running anything. */
static void fail(const char *step, int err, const char *detail) {
    if (status_fd >= 0) {
        char line[PATH_MAX + 64];
        int n = snprintf(line, sizeof line, "%s %d%s%s\n", step, err, detail ? " " : "", detail ? detail : "");
        if (n > (int)sizeof line - 1) n = (int)sizeof line - 1;
        ssize_t ignored = write(status_fd, line, (size_t)n);
        (void)ignored;
    }
    _exit(127);
}

/* A decimal number in [0, max], nothing else; -1 otherwise. */
static long long number(const char *text, unsigned long long max) {
    if (!text || !*text) return -1;
    unsigned long long value = 0;
    for (const char *p = text; *p; p++) {
        if (*p < '0' || *p > '9') return -1;
        value = value * 10 + (unsigned long long)(*p - '0');
        if (value > max) return -1;
    }
    return (long long)value;
}

static void join_cgroup(const char *dir) {
    char path[PATH_MAX], pid[32];
    if (snprintf(path, sizeof path, "%s/cgroup.procs", dir) >= (int)sizeof path) fail("cgroup", ENAMETOOLONG, dir);
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0) fail("cgroup", errno, dir);
    int n = snprintf(pid, sizeof pid, "%d", (int)getpid());
    if (write(fd, pid, (size_t)n) != n) fail("cgroup", errno ? errno : EIO, dir);
    close(fd);
}

static void drop_ids(uid_t uid, gid_t gid) {
    if (setgroups(0, NULL) != 0) fail("setgroups", errno, NULL);
    if (setresgid(gid, gid, gid) != 0) fail("setgid", errno, NULL);
    if (setresuid(uid, uid, uid) != 0) fail("setuid", errno, NULL);
    uid_t r, e, s;
    gid_t rg, eg, sg;
    if (getresuid(&r, &e, &s) != 0 || r != uid || e != uid || s != uid) fail("setuid", EPERM, "ids did not take");
    if (getresgid(&rg, &eg, &sg) != 0 || rg != gid || eg != gid || sg != gid) fail("setgid", EPERM, "ids did not take");
    if (getgroups(0, NULL) != 0) fail("setgroups", EPERM, "groups did not clear");
}

/* The environment: every NUL-ended entry of the fd, until its end. */
static char **read_env(int fd) {
    size_t size = 0, cap = 65536;
    char *buf = malloc(cap);
    if (!buf) fail("env", ENOMEM, NULL);
    for (;;) {
        if (size == cap) {
            cap *= 2;
            char *bigger = realloc(buf, cap);
            if (!bigger) fail("env", ENOMEM, NULL);
            buf = bigger;
        }
        ssize_t n = read(fd, buf + size, cap - size);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) fail("env", errno, NULL);
        if (n == 0) break;
        size += (size_t)n;
    }
    close(fd);
    if (size > 0 && buf[size - 1] != '\0') fail("env", EINVAL, "the last entry is not NUL-ended");
    size_t count = 0;
    for (size_t i = 0; i < size; i++) count += buf[i] == '\0';
    char **env = calloc(count + 1, sizeof *env);
    if (!env) fail("env", ENOMEM, NULL);
    size_t k = 0;
    for (size_t i = 0; i < size; i += strlen(buf + i) + 1) env[k++] = buf + i;
    return env;
}

static const char *lookup(char **env, const char *name) {
    size_t len = strlen(name);
    for (char **e = env; *e; e++)
        if (strncmp(*e, name, len) == 0 && (*e)[len] == '=') return *e + len + 1;
    return NULL;
}

/* execve, or each PATH entry in turn for a bare name; returns the errno to report. */
static int exec_program(char **argv, char **env) {
    const char *program = argv[0];
    if (strchr(program, '/')) {
        execve(program, argv, env);
        return errno;
    }
    const char *path = lookup(env, "PATH");
    if (!path) path = DEFAULT_PATH;
    int saved = 0, last = ENOENT;
    for (const char *dir = path;; dir++) {
        const char *end = strchrnul(dir, ':');
        char candidate[PATH_MAX];
        size_t dlen = (size_t)(end - dir);
        if (dlen + 1 + strlen(program) + 1 > sizeof candidate) {
            last = ENAMETOOLONG;
        } else {
            if (dlen == 0) { /* an empty entry is the working directory, as for CPython */
                strcpy(candidate, program);
            } else {
                memcpy(candidate, dir, dlen);
                candidate[dlen] = '/';
                strcpy(candidate + dlen + 1, program);
            }
            execve(candidate, argv, env);
            last = errno;
        }
        if (last != ENOENT && last != ENOTDIR && saved == 0) saved = last;
        if (*end == '\0') break;
        dir = end;
    }
    return saved ? saved : last;
}

int main(int argc, char **argv) {
    const char *cgroups[MAX_CGROUPS];
    int ncgroups = 0;
    long long rlimit_as = -1, uid = -1, gid = -1, env_fd = -1;
    const char *cwd = NULL, *bad = NULL;
    int opt;
    /* '+': options end at the first operand, so the task's own arguments are never parsed.
       A bad option is reported once all are read, so the status fd is known wherever it is. */
    while ((opt = getopt(argc, argv, "+c:a:u:g:d:e:s:")) != -1) {
        switch (opt) {
        case 's': status_fd = (int)number(optarg, INT_MAX); break;
        case 'c':
            if (ncgroups == MAX_CGROUPS) bad = bad ? bad : "too many -c";
            else cgroups[ncgroups++] = optarg;
            break;
        case 'a': rlimit_as = number(optarg, (unsigned long long)LLONG_MAX); if (rlimit_as < 0) bad = bad ? bad : "-a"; break;
        /* (uid_t)-1 means "unchanged" to setresuid: never a uid to run as. */
        case 'u': uid = number(optarg, (uid_t)-1 - 1); if (uid < 0) bad = bad ? bad : "-u"; break;
        case 'g': gid = number(optarg, (gid_t)-1 - 1); if (gid < 0) bad = bad ? bad : "-g"; break;
        case 'd': cwd = optarg; break;
        case 'e': env_fd = number(optarg, INT_MAX); if (env_fd < 0) bad = bad ? bad : "-e"; break;
        default: bad = bad ? bad : "unknown option";
        }
    }
    if (status_fd >= 0 && fcntl(status_fd, F_SETFD, FD_CLOEXEC) != 0) status_fd = -1;
    if (bad) fail("args", EINVAL, bad);
    if (optind >= argc) fail("args", EINVAL, "no program after --");
    if (env_fd < 0) fail("args", EINVAL, "no -e");
    if ((uid < 0) != (gid < 0)) fail("args", EINVAL, "-u and -g go together");
    if (fcntl((int)env_fd, F_SETFD, FD_CLOEXEC) != 0) fail("env", errno, NULL);

    for (int i = 0; i < ncgroups; i++) join_cgroup(cgroups[i]);
    if (rlimit_as >= 0) {
        struct rlimit limit = {(rlim_t)rlimit_as, (rlim_t)rlimit_as};
        if (setrlimit(RLIMIT_AS, &limit) != 0) fail("rlimit", errno, NULL);
    }
    if (uid >= 0) drop_ids((uid_t)uid, (gid_t)gid);
    /* From here on the process is the user's: nothing below is done with root's rights. */
    if (cwd && chdir(cwd) != 0) fail("chdir", errno, NULL);
    char **env = read_env((int)env_fd);
    fail("exec", exec_program(argv + optind, env), NULL);
    return 127;
}
