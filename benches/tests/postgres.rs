//! The PostgreSQL drain rows at tiny sizes: several runners and several bare connections on one
//! schema each, every record delivered or removed exactly once, and the schemas dropped.
//! Without a server they print a skip line and pass, unless `OUTBOX_PG_REQUIRED=1`.

mod support;

use outbox_benches::bare::BarePg;
use outbox_benches::pg::{self, PgServer};
use outbox_benches::FAR;
use outbox_core::clock::system_now;
use support::{runtime, schema_exists};

#[test]
fn runners_sharing_one_schema_deliver_every_record_once() -> outbox_core::Result<()> {
    runtime().block_on(async {
        let Some(server) = PgServer::find().await? else {
            return Ok(());
        };
        assert!(
            server.durability().starts_with("synchronous_commit="),
            "{}",
            server.durability()
        );
        for runners in pg::RUNNERS {
            let schema = server.schema();
            let stores = pg::stores(&schema, runners).await?;
            // Twice on the same stores, as criterion repeats it: each drain counts its own.
            for _ in 0..2 {
                let drained = pg::drain_runners(&stores, 90).await?;
                assert_eq!(drained.records, 90, "{runners} runners");
            }
            let stats = stores[runners - 1].stats().await?;
            assert_eq!((stats.delivered, stats.undelivered()), (180, 0));
            drop(stores);
            assert!(schema_exists(&server, schema.name()).await?);
            schema.drop().await?;
            assert!(!schema_exists(&server, schema.name()).await?);
        }
        Ok(())
    })
}

#[test]
fn bare_connections_remove_every_due_row_once_and_leave_later_ones() -> outbox_core::Result<()> {
    runtime().block_on(async {
        let Some(server) = PgServer::find().await? else {
            return Ok(());
        };
        for workers in pg::RUNNERS {
            let bare = BarePg::create(server.schema(), workers).await?;
            let now = system_now();
            bare.insert_batch(750, now).await?;
            bare.insert_batch(20, FAR).await?;
            assert_eq!(bare.drain(100, now).await?, 750, "{workers} workers");
            assert_eq!(bare.drain(100, now).await?, 0, "{workers} workers");
            // The rows due later are still there.
            assert_eq!(bare.drain(100, FAR).await?, 20, "{workers} workers");
            bare.schema().drop().await?;
        }
        Ok(())
    })
}

#[test]
fn paired_ratios_pairs_each_runner_count_with_as_many_bare_connections() -> outbox_core::Result<()>
{
    if runtime().block_on(PgServer::find())?.is_none() {
        return Ok(());
    }
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_paired-ratios"))
        .args(["--quick", "--only", "drain"])
        .output()
        .map_err(outbox_core::Error::backend)?;
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    for runners in pg::RUNNERS {
        let store = format!("store={}\t", pg::row_name(runners));
        let line = text
            .lines()
            .find(|l| l.starts_with("target=drain\t") && l.contains(&store))
            .unwrap_or_else(|| panic!("no line for {store} in {text}"));
        let ratio: f64 = line
            .split('\t')
            .find_map(|f| f.strip_prefix("ratio="))
            .and_then(|r| r.parse().ok())
            .unwrap_or_else(|| panic!("no ratio in {line}"));
        assert!(ratio > 0.0 && ratio.is_finite(), "{line}");
    }
    Ok(())
}
