/* cachebuild --tokens (tools/cachebuild_tokens.c): the token store builder's flags. */
#ifndef DLCACHE_CACHEBUILD_TOKENS_H
#define DLCACHE_CACHEBUILD_TOKENS_H

#include <signal.h>

/* 1 when the command line asks for a token store (--tokens anywhere in it). */
int cachebuild_tokens_wanted(int argc, char **argv);
/* Parse the token flags and build; returns the exit status. @p signaled: the signal that asked
 * the build to stop (SIGINT, SIGTERM), set by cachebuild's handler; 0 while none has. */
int cachebuild_tokens_main(int argc, char **argv, volatile sig_atomic_t *signaled);

#endif
