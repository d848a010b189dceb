/*
 * _pydb_transaction.h - what Database needs of the Transaction file.
 */
#ifndef PYDB_BINDING_TRANSACTION_H
#define PYDB_BINDING_TRANSACTION_H

#include "_pydb_database.h"

/* Abort the open transaction of `self`, if any (GIL held; no operation in
 * flight).  Called by Database.close() and dealloc. */
void transaction_abort_open(DatabaseObject *self);

#endif
