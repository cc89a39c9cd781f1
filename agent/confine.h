/* zerotrain: how zagent confines the jobs it runs (docs/DESIGN "Who may say what"). Every path
 * a job names — its data globs and the files they match, the model file, the checkpoint
 * directory, train.resume_from, the DeepSpeed CSV output and the checkpoint the coordinator
 * resumes the attempt from — must resolve, with
 * symbolic links followed, inside one of the agent's allowed roots, or no worker of the attempt
 * starts; and an agent running as root starts its workers as the user it is given. The checks
 * look at the local file system (realpath, lstat, readlink, glob) and keep no state, so tests
 * call them directly. All functions are thread-safe. */
#ifndef ZT_AGENT_CONFINE_H
#define ZT_AGENT_CONFINE_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "common/jobfile.h"
#include "common/status.h"

/* Canonicalises an allowed root into out (realpath): it must exist and be a directory.
 * origin names where it came from in messages ("--allow-path", "ZT_ALLOW_PATH").
 * Errors: ZT_ERR_CONFIG, saying what is wrong with the directory and what to do. */
zt_status zt_confine_root(const char *dir, const char *origin, char *out, size_t cap, zt_err *err);

/* Resolves an absolute path the way the kernel would find it when a worker opens or creates
 * it: symbolic links are followed (dangling ones too, to where they point); a tail that does
 * not exist yet is appended, as it stands, to its nearest existing ancestor, and may not
 * contain "..". Writes the result to out (cap bytes; PATH_MAX is enough). Errors:
 * ZT_ERR_CONFIG (a relative path, a ".." below a missing directory, a loop of links, or a name
 * that cannot be resolved, with the reason). */
zt_status zt_confine_resolve(const char *path, char *out, size_t cap, zt_err *err);

/* True when the resolved path is one of roots[0..n) or lies below one. Pure. */
bool zt_confine_inside(const char *resolved, char *const *roots, int n_roots);

/* Checks every path of job (as zt_job_parse resolved them) and resume_path (a checkpoint
 * directory, NULL or "" when none) against roots. A data glob is checked twice: its directory
 * part (what the pattern resolves to) and each file it matches now. ZT_OK when all resolve
 * inside; otherwise ZT_ERR_AUTH with one line that begins with `origin` (e.g. "job 12") and
 * names the key, the path as given, what it resolves to and the roots, and says what to do:
 *   job 12: model.init /srv/zt/gpt2.bin resolves to /etc/shadow, outside the agent's allowed
 *   paths (/srv/zt); start zagent with --allow-path DIR or move the model file inside them
 * ZT_ERR_CONFIG when a path cannot be resolved at all, ZT_ERR_NOMEM when glob runs out of
 * memory (the reason given the same way). */
zt_status zt_confine_check_job(const zt_job *job, const char *resume_path, char *const *roots,
                               int n_roots, const char *origin, zt_err *err);

/* Decides who the workers run as, the policy of --run-as and --allow-root:
 * - the agent runs as root (euid 0): with --run-as USER (uid run_as_uid) workers start as that
 *   user; without it zagent refuses to start unless allow_root; --run-as of root itself also
 *   needs allow_root;
 * - the agent runs as another user: --run-as may only name that user (nothing changes),
 *   since only root can start processes as someone else.
 * run_as is the name as given (NULL or "" = none). Sets *drop when workers must change user.
 * Errors: ZT_ERR_CONFIG with a message that says what to give. Pure. */
zt_status zt_confine_check_user(uid_t euid, const char *run_as, uid_t run_as_uid, bool allow_root,
                                bool *drop, zt_err *err);

#endif
