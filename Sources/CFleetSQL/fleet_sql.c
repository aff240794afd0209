// The fleet schema, embedded in pam-totpd at build time (C23 #embed: the compiler reads the files
// under sql/, no copy is committed, and a changed file rebuilds this one).
// pam-totpd init-database applies the migrations in order, then re-creates the API
// (docs/ARCHITECTURE.md, section 8). A new migration: its file in sql/migrations/, its bytes and
// its line in `migrations` below (FleetSQLTests checks the list against the directory).
#include "fleet_sql.h"


static const unsigned char m001[] = {
#embed "../../sql/migrations/001_tables.sql"
};

static const unsigned char m002[] = {
#embed "../../sql/migrations/002_attempts.sql"
};

static const unsigned char m003[] = {
#embed "../../sql/migrations/003_audit.sql"
};

static const unsigned char m004[] = {
#embed "../../sql/migrations/004_factor_kind.sql"
};

static const unsigned char m005[] = {
#embed "../../sql/migrations/005_hotp.sql"
};

static const unsigned char m006[] = {
#embed "../../sql/migrations/006_hotp_resync.sql"
};

static const unsigned char m007[] = {
#embed "../../sql/migrations/007_serial.sql"
};

static const unsigned char m008[] = {
#embed "../../sql/migrations/008_sent_codes.sql"
};

static const unsigned char m009[] = {
#embed "../../sql/migrations/009_window.sql"
};

static const unsigned char m010[] = {
#embed "../../sql/migrations/010_drift.sql"
};

static const unsigned char m011[] = {
#embed "../../sql/migrations/011_send_limits.sql"
};

static const unsigned char m012[] = {
#embed "../../sql/migrations/012_hosts.sql"
};

static const unsigned char api[] = {
#embed "../../sql/api.sql"
};

#define ENTRY(version, name, bytes) { version, name, bytes, sizeof bytes }
static const fleet_sql_file migrations[] = {
    ENTRY(1, "001_tables.sql", m001),
    ENTRY(2, "002_attempts.sql", m002),
    ENTRY(3, "003_audit.sql", m003),
    ENTRY(4, "004_factor_kind.sql", m004),
    ENTRY(5, "005_hotp.sql", m005),
    ENTRY(6, "006_hotp_resync.sql", m006),
    ENTRY(7, "007_serial.sql", m007),
    ENTRY(8, "008_sent_codes.sql", m008),
    ENTRY(9, "009_window.sql", m009),
    ENTRY(10, "010_drift.sql", m010),
    ENTRY(11, "011_send_limits.sql", m011),
    ENTRY(12, "012_hosts.sql", m012),
};
static const fleet_sql_file api_file = ENTRY(0, "api.sql", api);

const fleet_sql_file *fleet_sql_migrations(unsigned long *count) {
    *count = sizeof migrations / sizeof migrations[0];
    return migrations;
}

const fleet_sql_file *fleet_sql_api(void) { return &api_file; }
