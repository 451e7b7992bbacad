// Clang thread-safety annotations (https://clang.llvm.org/docs/ThreadSafetyAnalysis.html).
// Under clang with -Wthread-safety the compiler checks that every access to
// a GUARDED_BY member holds its mutex and that a REQUIRES function is only
// called with the mutex held; elsewhere the macros expand to nothing. The
// thread_safety_check test compiles the annotated sources this way. No
// dependency beyond the standard library: usable by every layer.
#pragma once

#if defined(__clang__)
#define TRAINSNAP_THREAD_ANNOTATION(x) __attribute__((x))
#else
#define TRAINSNAP_THREAD_ANNOTATION(x)
#endif

// On a class: its objects are locks (see Mutex in common/mutex.h).
#define CAPABILITY(x) TRAINSNAP_THREAD_ANNOTATION(capability(x))
// On a class: an RAII object that holds a lock for its lifetime.
#define SCOPED_CAPABILITY TRAINSNAP_THREAD_ANNOTATION(scoped_lockable)
// On a member: read and written only with the lock held.
#define GUARDED_BY(x) TRAINSNAP_THREAD_ANNOTATION(guarded_by(x))
// On a pointer member: the pointee is accessed only with the lock held.
#define PT_GUARDED_BY(x) TRAINSNAP_THREAD_ANNOTATION(pt_guarded_by(x))
// On a lock member: the order in which locks are taken (see docs/code-map.md).
#define ACQUIRED_BEFORE(...) TRAINSNAP_THREAD_ANNOTATION(acquired_before(__VA_ARGS__))
#define ACQUIRED_AFTER(...) TRAINSNAP_THREAD_ANNOTATION(acquired_after(__VA_ARGS__))
// On a function: the caller holds the lock(s).
#define REQUIRES(...) TRAINSNAP_THREAD_ANNOTATION(requires_capability(__VA_ARGS__))
// On a function: the caller must not hold the lock(s) (the function takes them).
#define EXCLUDES(...) TRAINSNAP_THREAD_ANNOTATION(locks_excluded(__VA_ARGS__))
// On a function: it takes / releases the lock(s) and returns holding / not holding them.
#define ACQUIRE(...) TRAINSNAP_THREAD_ANNOTATION(acquire_capability(__VA_ARGS__))
#define RELEASE(...) TRAINSNAP_THREAD_ANNOTATION(release_capability(__VA_ARGS__))
// On a function: asserts (to the analysis) that the lock is held.
#define ASSERT_CAPABILITY(x) TRAINSNAP_THREAD_ANNOTATION(assert_capability(x))
// On a function returning a lock: the lock it returns.
#define RETURN_CAPABILITY(x) TRAINSNAP_THREAD_ANNOTATION(lock_returned(x))
// On a function the analysis cannot follow; say why where it is used.
#define NO_THREAD_SAFETY_ANALYSIS TRAINSNAP_THREAD_ANNOTATION(no_thread_safety_analysis)
