//! `cargo run --example transactional_outbox`: an order and its outbox record in one SQLite
//! transaction, delivered downstream. See `outbox_examples::transactional_outbox`.

fn main() -> std::process::ExitCode {
    outbox_examples::main_with(outbox_examples::transactional_outbox::run)
}
