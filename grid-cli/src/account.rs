//! `grid account`: the caller's own balance, daily-cap use and ledger.

use std::process::ExitCode;

use clap::Args;
use grid_client::endpoint::{self, LedgerQuery};
use grid_core::ledger::EntryKind;
use grid_core::wire::account::AccountStatement;

use crate::{output, Context};

#[derive(Args, Debug)]
pub struct AccountArgs {
    /// Ledger entries per page (1 to 100).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=100))]
    limit: Option<u32>,
    /// Only entries of this kind.
    #[arg(long, value_parser = parse_kind)]
    kind: Option<EntryKind>,
    /// The `next` cursor printed by the previous page.
    #[arg(long)]
    cursor: Option<String>,
}

fn parse_kind(s: &str) -> Result<EntryKind, String> {
    EntryKind::parse(s)
        .ok_or_else(|| format!("one of {}", EntryKind::ALL.iter().map(|k| k.as_str()).collect::<Vec<_>>().join(", ")))
}

/// Micro-euros as euros with six decimals.
fn euros(micros: i64) -> String {
    let sign = if micros < 0 { "-" } else { "" };
    let m = micros.unsigned_abs();
    format!("{sign}{}.{:06} EUR", m / 1_000_000, m % 1_000_000)
}

/// GET /account. With --json: the answer as it came.
pub async fn run(cx: &Context, args: AccountArgs) -> anyhow::Result<ExitCode> {
    let query = LedgerQuery { limit: args.limit, kind: args.kind, cursor: args.cursor };
    let reply = cx.client.send_raw(&endpoint::account(&query)).await?;
    if cx.json {
        output::json_line(&reply)?;
        return Ok(ExitCode::SUCCESS);
    }
    let a: AccountStatement = reply.decode()?;
    let v = &a.account;
    let mut pairs = vec![
        ("account", format!("{} ({})", v.account_id, v.name)),
        ("credit", euros(v.credit_micros)),
        ("reserved", euros(v.reserved_micros)),
        ("available", euros(v.available_micros)),
    ];
    if v.suspended {
        pairs.push(("suspended", "yes".into()));
    }
    if let Some(cap) = &a.daily_cap {
        let limit = cap.cap_micros.map_or("no cap".to_string(), euros);
        pairs.push(("today", format!("{} of {limit}, resets {}", euros(cap.used_micros), cap.resets_at.to_iso())));
    }
    let mut lines = output::key_values(&pairs);
    lines.push(String::new());
    let rows: Vec<Vec<String>> = a
        .ledger
        .iter()
        .map(|l| {
            vec![
                l.created_at.to_iso(),
                l.kind.as_str().to_string(),
                euros(l.amount_micros),
                l.subject.clone().unwrap_or_else(|| "-".into()),
            ]
        })
        .collect();
    lines.extend(output::table(&["WHEN", "KIND", "AMOUNT", "SUBJECT"], &rows));
    if let Some(next) = &a.next_cursor {
        lines.push(format!("next: grid account --cursor {next}"));
    }
    output::lines(&lines)?;
    Ok(ExitCode::SUCCESS)
}
