#[path = "all.rs"]
mod all;
