//! The simulated server: a capacity per second, down during the outage, 429 when over.

use std::time::Duration;

use outbox_core::{Millis, Outcome, RetryAfter};

use crate::params::Params;

/// What the server did with one request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Answer {
    /// Served: the record is delivered.
    Served,
    /// Over capacity this second: 429 with `Retry-After`.
    TooMany,
    /// Down: no answer (the connection is refused).
    Refused,
}

impl Answer {
    /// The outcome the device's sink reports.
    pub(crate) fn outcome(self, retry_after: Option<Duration>) -> Outcome {
        match self {
            Answer::Served => Outcome::Delivered,
            Answer::TooMany => Outcome::transient("HTTP 429", retry_after.map(RetryAfter::Delay)),
            Answer::Refused => Outcome::no_answer("connection refused"),
        }
    }
}

/// What reached the server, second by second.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Series {
    /// Requests that arrived in each second (served, 429 or refused).
    pub requests: Vec<u32>,
    /// Requests answered 429 in each second.
    pub too_many: Vec<u32>,
    /// Requests refused (no answer) in each second.
    pub refused: Vec<u32>,
}

impl Series {
    fn bump(v: &mut Vec<u32>, second: usize) {
        if v.len() <= second {
            v.resize(second + 1, 0);
        }
        v[second] += 1;
    }

    /// Requests in second `s` (0 past the end).
    pub fn at(&self, s: usize) -> u32 {
        self.requests.get(s).copied().unwrap_or(0)
    }
}

/// The server of one scenario.
#[derive(Debug)]
pub(crate) struct Server {
    params: Params,
    pub(crate) series: Series,
    /// Requests served in each second.
    served: Vec<u32>,
}

impl Server {
    pub(crate) fn new(params: &Params) -> Self {
        Server {
            params: params.clone(),
            series: Series::default(),
            served: Vec::new(),
        }
    }

    /// A request arrives at `t`.
    pub(crate) fn request(&mut self, t: Millis) -> Answer {
        let second = usize::try_from(t / 1_000).unwrap_or(usize::MAX);
        Series::bump(&mut self.series.requests, second);
        if self.params.server_down(t) {
            Series::bump(&mut self.series.refused, second);
            return Answer::Refused;
        }
        if self.served.len() <= second {
            self.served.resize(second + 1, 0);
        }
        if self.served[second] < self.params.capacity {
            self.served[second] += 1;
            Answer::Served
        } else {
            Series::bump(&mut self.series.too_many, second);
            Answer::TooMany
        }
    }
}
