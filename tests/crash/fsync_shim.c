/*
 * fsync_shim: an LD_PRELOAD library that records what a process made durable.
 *
 * A SIGKILL leaves the page cache intact, so a write that was never fsynced still reads
 * back after a kill: a plain kill test cannot catch a missing fsync. This shim models the
 * machine losing power instead. Every fsync(2) or fdatasync(2) of a file under
 * $MURMUR_CRASH_ROOT snapshots what it made durable into the journal directory
 * $MURMUR_CRASH_JOURNAL:
 *
 *   - a regular file: its whole content, as of the call (blob), and the record
 *       F <ino> <born> <blob>
 *   - a directory: its entries, as of the call (blob of lines
 *     `<f|d|l> <ino> <born> <mode> <name>`), and the record
 *       D <ino> <born> <blob>
 *
 * `born` is the inode's birth time (statx), `sec.nsec`: with it an inode number that a
 * deleted file freed and a new file took is told apart from the old one. The root and
 * everything under it must be on one file system (inode numbers are per file system).
 *
 * Each record is one O_APPEND write of the journal, made after its blob is complete, so a
 * process killed mid-snapshot leaves no record of it. The replay (tests/src/crash.rs)
 * rebuilds the directory tree from the latest listing of each directory and the latest
 * content of each file: a name is there only if its directory was fsynced after it was
 * made, and a file holds only what an fsync of it covered (a name whose file was never
 * fsynced is an empty file, as after a crash under delayed allocation).
 *
 * sync(2) and syncfs(2) are not modelled: a call under the root writes an `X` record,
 * which the replay refuses, so a process that relies on them fails the test loudly rather
 * than passing it by accident.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static pthread_mutex_t journal_lock = PTHREAD_MUTEX_INITIALIZER;
static unsigned long next_blob;

/* The last blob written for each inode by this process, so a file synced a thousand
 * times costs one blob on disk (the replay reads only the latest). */
#define LAST_MAX 4096
static struct last {
    unsigned long ino;
    long long born_sec;
    unsigned born_nsec;
    char blob[64];
} last[LAST_MAX];
static size_t last_len;

/* An inode as the journal names it: device, number, birth time. */
struct identity {
    unsigned long ino;
    long long born_sec;
    unsigned born_nsec;
    unsigned mode;
};

static int identify(int dir_fd, const char *name, int flags, struct identity *id) {
    struct statx st;
    if (statx(dir_fd, name, flags | AT_SYMLINK_NOFOLLOW, STATX_TYPE | STATX_MODE | STATX_INO | STATX_BTIME, &st) < 0)
        return -1;
    id->ino = (unsigned long)st.stx_ino;
    id->born_sec = (st.stx_mask & STATX_BTIME) ? (long long)st.stx_btime.tv_sec : 0;
    id->born_nsec = (st.stx_mask & STATX_BTIME) ? st.stx_btime.tv_nsec : 0;
    id->mode = st.stx_mode;
    return 0;
}

static const char *setting(const char *name) {
    const char *value = getenv(name);
    return value && *value ? value : NULL;
}

/* The path `fd` refers to, when it lies under the root; NULL otherwise. */
static int watched(int fd, char *path, size_t size) {
    const char *root = setting("MURMUR_CRASH_ROOT");
    if (!root || !setting("MURMUR_CRASH_JOURNAL")) return 0;
    char link[64];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t len = readlink(link, path, size - 1);
    if (len < 0) return 0;
    path[len] = 0;
    size_t root_len = strlen(root);
    while (root_len > 1 && root[root_len - 1] == '/') root_len--;
    return strncmp(path, root, root_len) == 0 && (path[root_len] == '/' || path[root_len] == 0);
}

static void die(const char *what) {
    /* A journal that cannot be written would make the replay lie: stop the process. */
    char message[512];
    int len = snprintf(message, sizeof message, "fsync_shim: %s: %s\n", what, strerror(errno));
    if (len > 0) (void)!write(2, message, (size_t)len);
    abort();
}

static void append_record(const char *record) {
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/journal", setting("MURMUR_CRASH_JOURNAL"));
    int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0) die("cannot open the journal");
    size_t len = strlen(record);
    if (write(fd, record, len) != (ssize_t)len) die("cannot append to the journal");
    close(fd);
}

/* Opens a new blob; its name goes to `name`. */
static FILE *new_blob(char *name, size_t size, char *path, size_t path_size) {
    snprintf(name, size, "%ld-%lu", (long)getpid(), next_blob++);
    snprintf(path, path_size, "%s/blobs/%s", setting("MURMUR_CRASH_JOURNAL"), name);
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s/blobs", setting("MURMUR_CRASH_JOURNAL"));
    if (mkdir(dir, 0700) < 0 && errno != EEXIST) die("cannot create the blob directory");
    FILE *blob = fopen(path, "we");
    if (!blob) die("cannot create a blob");
    return blob;
}

static void forget_previous(const struct identity *id, const char *blob) {
    for (size_t i = 0; i < last_len; i++) {
        if (last[i].ino == id->ino && last[i].born_sec == id->born_sec && last[i].born_nsec == id->born_nsec) {
            char path[PATH_MAX];
            snprintf(path, sizeof path, "%s/blobs/%s", setting("MURMUR_CRASH_JOURNAL"), last[i].blob);
            unlink(path);
            snprintf(last[i].blob, sizeof last[i].blob, "%s", blob);
            return;
        }
    }
    if (last_len < LAST_MAX) {
        last[last_len].ino = id->ino;
        last[last_len].born_sec = id->born_sec;
        last[last_len].born_nsec = id->born_nsec;
        snprintf(last[last_len].blob, sizeof last[last_len].blob, "%s", blob);
        last_len++;
    }
}

static void append_synced(char kind, const struct identity *id, const char *blob) {
    char record[192];
    snprintf(record, sizeof record, "%c %lu %lld.%09u %s\n", kind, id->ino, id->born_sec, id->born_nsec, blob);
    append_record(record);
    forget_previous(id, blob);
}

static void snapshot_file(int fd, const struct identity *id) {
    char link[64];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    /* A fresh descriptor: `fd` may be write-only, and its offset is the caller's. */
    int source = open(link, O_RDONLY | O_CLOEXEC);
    if (source < 0) die("cannot reopen a synced file");
    char name[64], path[PATH_MAX];
    FILE *blob = new_blob(name, sizeof name, path, sizeof path);
    char buffer[1 << 16];
    for (;;) {
        ssize_t got = read(source, buffer, sizeof buffer);
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) die("cannot read a synced file");
        if (got == 0) break;
        if (fwrite(buffer, 1, (size_t)got, blob) != (size_t)got) die("cannot write a blob");
    }
    close(source);
    if (fclose(blob) != 0) die("cannot write a blob");
    append_synced('F', id, name);
}

static void snapshot_dir(int fd, const struct identity *id) {
    char link[64];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    int dir_fd = open(link, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dir_fd < 0) die("cannot reopen a synced directory");
    DIR *dir = fdopendir(dir_fd);
    if (!dir) die("cannot list a synced directory");
    char name[64], path[PATH_MAX];
    FILE *blob = new_blob(name, sizeof name, path, sizeof path);
    struct dirent *entry;
    while ((entry = readdir(dir)) != NULL) {
        if (strcmp(entry->d_name, ".") == 0 || strcmp(entry->d_name, "..") == 0) continue;
        struct identity child;
        if (identify(dir_fd, entry->d_name, 0, &child) < 0) continue; /* gone meanwhile */
        char kind = S_ISDIR(child.mode) ? 'd' : S_ISREG(child.mode) ? 'f' : S_ISLNK(child.mode) ? 'l' : 0;
        if (!kind) continue;
        fprintf(blob, "%c %lu %lld.%09u %o %s\n", kind, child.ino, child.born_sec, child.born_nsec,
                child.mode & 07777, entry->d_name);
    }
    closedir(dir);
    if (fclose(blob) != 0) die("cannot write a blob");
    append_synced('D', id, name);
}

static void record(int fd) {
    char path[PATH_MAX];
    if (!watched(fd, path, sizeof path)) return;
    struct identity id;
    if (identify(fd, "", AT_EMPTY_PATH, &id) < 0) return; /* the real call reports the bad descriptor */
    pthread_mutex_lock(&journal_lock);
    if (S_ISREG(id.mode)) snapshot_file(fd, &id);
    else if (S_ISDIR(id.mode)) snapshot_dir(fd, &id);
    pthread_mutex_unlock(&journal_lock);
}

static void *real(const char *name) {
    void *function = dlsym(RTLD_NEXT, name);
    if (!function) {
        errno = ENOSYS;
        die(name);
    }
    return function;
}

int fsync(int fd) {
    static int (*next)(int);
    if (!next) next = (int (*)(int))real("fsync");
    record(fd);
    return next(fd);
}

int fdatasync(int fd) {
    static int (*next)(int);
    if (!next) next = (int (*)(int))real("fdatasync");
    record(fd);
    return next(fd);
}

int syncfs(int fd) {
    static int (*next)(int);
    if (!next) next = (int (*)(int))real("syncfs");
    char path[PATH_MAX];
    if (watched(fd, path, sizeof path)) append_record("X syncfs\n");
    return next(fd);
}

void sync(void) {
    static void (*next)(void);
    if (!next) next = (void (*)(void))real("sync");
    if (setting("MURMUR_CRASH_ROOT") && setting("MURMUR_CRASH_JOURNAL")) append_record("X sync\n");
    next();
}
