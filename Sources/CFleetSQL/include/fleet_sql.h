// CFleetSQL: the fleet schema's SQL files, embedded at build time (fleet_sql.c).
#ifndef PAM_TOTP_FLEET_SQL_H
#define PAM_TOTP_FLEET_SQL_H

typedef struct {
    int version;                 // the migration's number (0 for api.sql)
    const char *name;            // its file name
    const unsigned char *bytes;  // the file's bytes, not NUL-terminated
    unsigned long length;
} fleet_sql_file;

// The migrations in order; *count gets how many.
const fleet_sql_file *fleet_sql_migrations(unsigned long *count);
// sql/api.sql: every function's current body, in the schema pam_totp_api.
const fleet_sql_file *fleet_sql_api(void);

#endif
