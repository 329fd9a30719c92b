//! What the benches' smoke tests share: their runtime, and a look at the server's schemas.
#![allow(dead_code)] // each test binary uses part of it

use outbox_benches::pg::PgServer;

/// The runtime every smoke test runs its workloads on: two workers, as the benchmarks use.
pub(crate) fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime")
}

/// Whether a schema of that name exists on the server.
pub(crate) async fn schema_exists(server: &PgServer, name: &str) -> outbox_core::Result<bool> {
    let (client, connection) = tokio_postgres::connect(server.url(), tokio_postgres::NoTls)
        .await
        .map_err(outbox_core::Error::backend)?;
    tokio::spawn(connection);
    let row = client
        .query_one(
            "SELECT count(*) FROM information_schema.schemata WHERE schema_name = $1",
            &[&name],
        )
        .await
        .map_err(outbox_core::Error::backend)?;
    Ok(row.get::<_, i64>(0) == 1)
}
