//! `cargo run --example offline_first`: connectivity from an `outbox_link::Link` and the four states
//! a write goes through. See `outbox_examples::offline_first`.

fn main() -> std::process::ExitCode {
    outbox_examples::main_with(outbox_examples::offline_first::run)
}
