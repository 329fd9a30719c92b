//! The one place the statements of `sql` run: a pooled connection, a transaction on one, or
//! the caller's own transaction, and the enqueue's pipelined batches.

use outbox_core::Result;
use tokio_postgres::types::ToSql;
use tokio_postgres::{Row, Statement};

use crate::codec::RawRecord;
use crate::enqueue::{Answer, Execute, Param, Shape, Stmt};
use crate::error::{corrupt, pg};

/// Parameters as tokio-postgres takes them.
pub(crate) type Params<'a> = &'a [&'a (dyn ToSql + Sync)];

/// Where statements run: a pooled connection, a transaction on one (both cache their prepared
/// statements per connection), or the caller's own transaction (prepared on the spot, since
/// its connection is not ours to cache on).
///
/// Nothing is sent before a future is first polled, so futures polled in order (`try_join!`)
/// go out, and run, in that order, pipelined on one connection.
pub(crate) enum Exec<'a> {
    /// A pooled connection, outside a transaction.
    Pooled(&'a deadpool_postgres::Object),
    /// A transaction on a pooled connection.
    Transaction(&'a deadpool_postgres::Transaction<'a>),
    /// The caller's transaction.
    Caller(&'a tokio_postgres::Transaction<'a>),
}

impl Exec<'_> {
    /// The prepared statement for `sql`.
    pub(crate) async fn prepare(&self, sql: &str) -> Result<Statement, tokio_postgres::Error> {
        match self {
            Exec::Pooled(client) => client.prepare_cached(sql).await,
            Exec::Transaction(tx) => tx.prepare_cached(sql).await,
            Exec::Caller(tx) => tx.prepare(sql).await,
        }
    }

    /// Runs a prepared statement and returns its rows.
    pub(crate) async fn query(
        &self,
        statement: &Statement,
        params: Params<'_>,
    ) -> Result<Vec<Row>, tokio_postgres::Error> {
        match self {
            Exec::Pooled(client) => client.query(statement, params).await,
            Exec::Transaction(tx) => tx.query(statement, params).await,
            Exec::Caller(tx) => tx.query(statement, params).await,
        }
    }

    /// Runs a prepared statement and returns how many rows it changed.
    pub(crate) async fn execute(
        &self,
        statement: &Statement,
        params: Params<'_>,
    ) -> Result<u64, tokio_postgres::Error> {
        match self {
            Exec::Pooled(client) => client.execute(statement, params).await,
            Exec::Transaction(tx) => tx.execute(statement, params).await,
            Exec::Caller(tx) => tx.execute(statement, params).await,
        }
    }

    /// Prepares `sql` and returns its rows.
    pub(crate) async fn rows(
        &self,
        sql: &str,
        params: Params<'_>,
    ) -> Result<Vec<Row>, tokio_postgres::Error> {
        let statement = self.prepare(sql).await?;
        self.query(&statement, params).await
    }

    /// Prepares `sql` and returns how many rows it changed.
    pub(crate) async fn run(
        &self,
        sql: &str,
        params: Params<'_>,
    ) -> Result<u64, tokio_postgres::Error> {
        let statement = self.prepare(sql).await?;
        self.execute(&statement, params).await
    }
}

/// The enqueue's statements ([`Execute`]) on tokio-postgres: every statement the enqueue may
/// send prepared in one round trip (cached on pooled connections), then each batch pipelined.
pub(crate) struct Pipelined<'a> {
    ex: &'a Exec<'a>,
    prepared: Vec<(String, Statement)>,
}

impl<'a> Pipelined<'a> {
    pub(crate) fn new(ex: &'a Exec<'a>) -> Self {
        Pipelined {
            ex,
            prepared: Vec::new(),
        }
    }

    fn statement(&self, sql: &str) -> Result<&Statement> {
        self.prepared
            .iter()
            .find(|(text, _)| text == sql)
            .map(|(_, statement)| statement)
            .ok_or_else(|| corrupt("a statement of the enqueue was not prepared"))
    }
}

/// A parameter as tokio-postgres takes it.
fn to_sql<'p>(param: &'p Param<'_>) -> &'p (dyn ToSql + Sync) {
    match param {
        Param::Int(v) => v,
        Param::Text(v) => v,
        Param::Ints(v) => v,
        Param::OptInts(v) => v,
        Param::Texts(v) => v,
        Param::OptTexts(v) => v,
        Param::Blobs(v) => v,
        Param::Bools(v) => v,
    }
}

/// The rows of a statement of `shape`.
fn answer(shape: Shape, rows: &[Row]) -> Result<Answer> {
    let first = |row: &Row| row.try_get(0).map_err(pg);
    Ok(match shape {
        Shape::Done => Answer::Done,
        Shape::Ids => Answer::Ids(rows.iter().map(first).collect::<Result<_>>()?),
        Shape::Groups => Answer::Groups(
            rows.iter()
                .map(|row| row.try_get(0).map_err(pg))
                .collect::<Result<_>>()?,
        ),
        Shape::Tails => Answer::Tails(
            rows.iter()
                .map(|row| Ok((row.try_get(0).map_err(pg)?, row.try_get(1).map_err(pg)?)))
                .collect::<Result<_>>()?,
        ),
        Shape::Records => Answer::Records(
            rows.iter()
                .map(RawRecord::from_row)
                .collect::<Result<_>>()?,
        ),
        Shape::Usage => Answer::Usage(
            rows.iter()
                .map(|row| Ok((row.try_get(0).map_err(pg)?, row.try_get(1).map_err(pg)?)))
                .collect::<Result<_>>()?,
        ),
    })
}

impl Execute for Pipelined<'_> {
    async fn prepare(&mut self, texts: &[&str]) -> Result<()> {
        let mut missing: Vec<&str> = Vec::new();
        for text in texts {
            if self.statement(text).is_err() && !missing.contains(text) {
                missing.push(text);
            }
        }
        let ex = self.ex;
        let statements = futures::future::try_join_all(missing.iter().map(|text| ex.prepare(text)))
            .await
            .map_err(pg)?;
        self.prepared
            .extend(missing.into_iter().map(str::to_owned).zip(statements));
        Ok(())
    }

    async fn run(&mut self, batch: Vec<Stmt<'_>>) -> Result<Vec<Answer>> {
        let texts: Vec<&str> = batch.iter().map(|stmt| stmt.sql).collect();
        self.prepare(&texts).await?;
        let params: Vec<Vec<&(dyn ToSql + Sync)>> = batch
            .iter()
            .map(|stmt| stmt.params.iter().map(to_sql).collect())
            .collect();
        let ex = self.ex;
        let mut runs = Vec::with_capacity(batch.len());
        for (stmt, params) in batch.iter().zip(&params) {
            let statement = self.statement(stmt.sql)?;
            let shape = stmt.shape;
            runs.push(async move {
                if shape == Shape::Done {
                    ex.execute(statement, params)
                        .await
                        .map(|_| Answer::Done)
                        .map_err(pg)
                } else {
                    let rows = ex.query(statement, params).await.map_err(pg)?;
                    answer(shape, &rows)
                }
            });
        }
        // `try_join_all` polls up to 30 futures in their order (a larger set would go to an
        // unordered set; a batch here holds at most five), so the statements go out, and run,
        // in the batch's order, pipelined on the one connection.
        futures::future::try_join_all(runs).await
    }
}
