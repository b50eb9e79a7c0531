//! [`InTransaction`]: the bound that makes "enqueue outside a transaction" a compile error.

use crate::backend::Backend;

/// A live database transaction that events can be written into.
///
/// Implemented for `&mut sqlx::Transaction<'_, DB>` and nothing else: a pool, `&PgPool` or a bare connection
/// would commit the event on its own, apart from the domain change, so they do not compile.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a live transaction: outbox events can only be written inside one",
    label = "expected `&mut sqlx::Transaction<'_, _>`",
    note = "begin a transaction (`let mut tx = pool.begin().await?;`), run your domain change and the enqueue on it \
            (`&mut tx`), then `tx.commit().await?`: the event commits or rolls back with the change"
)]
pub trait InTransaction: sealed::Sealed {
    /// The database the transaction runs on.
    type Database: Backend;

    /// The connection the transaction runs on.
    #[doc(hidden)]
    fn connection(&mut self) -> &mut <Self::Database as sqlx::Database>::Connection;
}

impl<'c, DB: Backend> InTransaction for &mut sqlx::Transaction<'c, DB> {
    type Database = DB;

    fn connection(&mut self) -> &mut DB::Connection {
        self
    }
}

mod sealed {
    pub trait Sealed {}
    impl<'c, DB: crate::backend::Backend> Sealed for &mut sqlx::Transaction<'c, DB> {}
}
