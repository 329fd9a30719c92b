//! `cargo run --example postgres_fleet`: three runners sharing one PostgreSQL schema. See
//! `outbox_examples::postgres_fleet`.

fn main() -> std::process::ExitCode {
    outbox_examples::main_with(outbox_examples::postgres_fleet::run)
}
