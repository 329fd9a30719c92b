//! The command line of `cargo xtask bench-report`: a quick run or a full one, how many records
//! `drain-rss` drains, and whether to measure at all or render what is on disk.

use std::path::PathBuf;

/// What `bench-report` was asked to do.
pub(super) struct Options {
    /// `--quick`: the quick plan of the harness and few samples in the tools.
    pub(super) quick: bool,
    /// Records of each `drain-rss` run (`--rss-records`; 1,000,000, or 20,000 when quick).
    pub(super) rss_records: usize,
    /// `drain-rss` lines measured earlier (the 1,000,000-record drain of a slow store takes
    /// longer than the criterion run), instead of running it again.
    pub(super) rss_from: Option<PathBuf>,
    /// Render from the criterion results already on disk.
    pub(super) no_run: bool,
}

/// Reads the arguments after `bench-report`.
pub(super) fn options(args: &[String]) -> Result<Options, String> {
    let mut options = Options {
        quick: false,
        rss_records: 0,
        rss_from: None,
        no_run: false,
    };
    let mut rss_records = None;
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--quick" => options.quick = true,
            "--no-run" => options.no_run = true,
            "--rss-records" => {
                let n = args.next().map(String::as_str).unwrap_or_default();
                rss_records = Some(
                    n.parse()
                        .map_err(|_| format!("--rss-records takes a count, not {n:?}"))?,
                );
            }
            "--rss-from" => {
                let file = args
                    .next()
                    .ok_or("--rss-from takes a file of drain-rss lines")?;
                options.rss_from = Some(PathBuf::from(file));
            }
            other => return Err(format!("unknown bench-report argument {other:?}")),
        }
    }
    options.rss_records = rss_records.unwrap_or(if options.quick { 20_000 } else { 1_000_000 });
    Ok(options)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_take_quick_and_a_record_count() {
        let quick = options(&["--quick".to_owned()]).unwrap();
        assert!(quick.quick);
        assert_eq!(quick.rss_records, 20_000);
        let full = options(&["--rss-records".to_owned(), "500".to_owned()]).unwrap();
        assert_eq!((full.quick, full.rss_records), (false, 500));
        assert!(options(&["--fast".to_owned()]).is_err());
        let reuse = options(&["--rss-from".to_owned(), "rss.tsv".to_owned()]).unwrap();
        assert_eq!(reuse.rss_from, Some(PathBuf::from("rss.tsv")));
        assert!(options(&["--rss-from".to_owned()]).is_err());
        assert!(options(&["--no-run".to_owned()]).unwrap().no_run);
    }
}
