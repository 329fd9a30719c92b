//! `cargo run --example sqlx_orders`: an order and its outbox record in one sqlx transaction
//! on PostgreSQL, delivered downstream. See `outbox_examples::sqlx_orders`.

fn main() -> std::process::ExitCode {
    outbox_examples::main_with(outbox_examples::sqlx_orders::run)
}
