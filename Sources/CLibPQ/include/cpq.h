// libpq for pam-totpd's PostgreSQL backend, loaded at run time (dlopen) and only in fleet mode:
// pam-totpd links no database client, so a host without fleet mode needs neither libpq nor the
// TLS, Kerberos and LDAP libraries it brings (Debian: the package pam-totp-fleet depends on
// libpq5). pam_totp.so never touches it (docs/ARCHITECTURE.md, section 8). libpq-fe.h (Debian:
// libpq-dev, at build time) gives the types; every function is called through cpq_*.
#ifndef CPQ_H
#define CPQ_H
#include <stddef.h>
#include <postgresql/libpq-fe.h>

/// Loads libpq.so.5 once (thread-safe). 0: loaded; -1: not, with the reason in `why`.
int cpq_load(char *why, size_t why_size);

PGconn *cpq_PQconnectStartParams(const char *const *keywords, const char *const *values, int expand_dbname);
PostgresPollingStatusType cpq_PQconnectPoll(PGconn *conn);
ConnStatusType cpq_PQstatus(const PGconn *conn);
int cpq_PQsocket(const PGconn *conn);
void cpq_PQfinish(PGconn *conn);
char *cpq_PQerrorMessage(const PGconn *conn);
int cpq_PQsendQuery(PGconn *conn, const char *query);
int cpq_PQsendQueryParams(PGconn *conn, const char *command, int nParams, const Oid *paramTypes,
                          const char *const *paramValues, const int *paramLengths, const int *paramFormats,
                          int resultFormat);
int cpq_PQflush(PGconn *conn);
int cpq_PQisBusy(PGconn *conn);
int cpq_PQconsumeInput(PGconn *conn);
PGresult *cpq_PQgetResult(PGconn *conn);
void cpq_PQclear(PGresult *res);
ExecStatusType cpq_PQresultStatus(const PGresult *res);
int cpq_PQntuples(const PGresult *res);
int cpq_PQnfields(const PGresult *res);
int cpq_PQgetisnull(const PGresult *res, int tup_num, int field_num);
char *cpq_PQgetvalue(const PGresult *res, int tup_num, int field_num);
char *cpq_PQresultErrorField(const PGresult *res, int fieldcode);
PQconninfoOption *cpq_PQconninfoParse(const char *conninfo, char **errmsg);
void cpq_PQconninfoFree(PQconninfoOption *connOptions);
void cpq_PQfreemem(void *ptr);
PGnotify *cpq_PQnotifies(PGconn *conn);
// Pipeline mode (libpq 14 and later; Debian 12 has 15): a call and its deadline in one round trip.
int cpq_PQenterPipelineMode(PGconn *conn);
int cpq_PQexitPipelineMode(PGconn *conn);
int cpq_PQpipelineSync(PGconn *conn);

#endif
