#ifndef CGATEHOUSE_SQLITE_SHIM_H
#define CGATEHOUSE_SQLITE_SHIM_H
// SQLite for Swift. SQLITE_TRANSIENT is a cast of -1 to a function pointer, which the
// importer cannot express, so it is handed over through a function.
#include <sqlite3.h>

static inline sqlite3_destructor_type gh_sqlite_transient(void) { return SQLITE_TRANSIENT; }
static inline int gh_sqlite_config_single_thread_off(void) {
  // Each connection is used by one thread at a time; the library's own mutexes stay on.
  return sqlite3_config(SQLITE_CONFIG_MULTITHREAD);
}
#endif
