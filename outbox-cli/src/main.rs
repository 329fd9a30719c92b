//! The `outbox` binary; everything lives in the `outbox_cli` library.

fn main() -> std::process::ExitCode {
    outbox_cli::main()
}
