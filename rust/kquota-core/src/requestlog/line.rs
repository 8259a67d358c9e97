//! A line's head (`[<time>] <LEVEL> Completed request:`), its JSON body and its timestamp.

/// What the head of a line says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Head {
    /// Not `[<time>] <LEVEL> Completed request:` within its first [`HEAD_CHARS`].
    None,
    /// A `Completed request:` line not followed by `{`: the pre-2.8 text format.
    Text,
    /// A `Completed request:{` line: the JSON object starts at byte `json`.
    Json { json: usize },
}

/// The head is looked for in the first characters of a line only, so a long line that
/// is not a request line costs nothing more.
pub const HEAD_CHARS: usize = 80;
/// The logger's name ending a request line.
pub const SUFFIX: &[u8] = b" (kafka.request.logger)";
/// The logger's name ending a `RequestChannel$` TRACE line.
pub const TRACE_SUFFIX: &[u8] = b"(kafka.network.RequestChannel$)";
const MARKER: &[u8] = b" Completed request:";
/// `[yyyy-MM-dd HH:mm:ss,SSS] `
const STAMP: usize = 26;

/// The head of a line (valid UTF-8).
pub fn head(line: &[u8]) -> Head {
    let digits = |range: std::ops::Range<usize>| line[range].iter().all(u8::is_ascii_digit);
    if line.len() < STAMP + 1 + MARKER.len()
        || line[0] != b'['
        || !(digits(1..5) && digits(6..8) && digits(9..11))
        || !(digits(12..14) && digits(15..17) && digits(18..20) && digits(21..24))
        || line[5] != b'-'
        || line[8] != b'-'
        || line[11] != b' '
        || line[14] != b':'
        || line[17] != b':'
        || line[20] != b','
        || &line[24..STAMP] != b"] "
    {
        return Head::None;
    }
    let level = line[STAMP..]
        .iter()
        .take_while(|b| b.is_ascii_uppercase())
        .count();
    let end = STAMP + level + MARKER.len();
    // the head and what follows it must fit in the first HEAD_CHARS characters (all
    // ASCII up to `end`, so bytes are characters there)
    if level == 0 || end > HEAD_CHARS || !line[STAMP + level..].starts_with(MARKER) {
        return Head::None;
    }
    if end < HEAD_CHARS && line.get(end) == Some(&b'{') {
        Head::Json { json: end }
    } else {
        Head::Text
    }
}

/// The JSON text of a `Completed request:{` line: from its `{` to the logger's name, or
/// `None` when the line does not end with it (truncated).
pub fn body(line: &[u8], json: usize) -> Option<&[u8]> {
    if !line.ends_with(SUFFIX) || line.len() - SUFFIX.len() <= json {
        return None;
    }
    Some(&line[json..line.len() - SUFFIX.len()])
}

/// The line's timestamp (`yyyy-MM-dd HH:mm:ss,SSS`, its head's digits) as microseconds
/// since the epoch of the wall-clock time read as UTC, or `None` for an impossible date
/// or time. Second 60 with 0 ms is the next minute's first, as Spark's `make_timestamp`
/// reads it (a leap second).
pub fn wall_clock_micros(line: &[u8]) -> Option<i64> {
    let n = |from: usize, to: usize| {
        line[from..to]
            .iter()
            .fold(0i64, |acc, d| acc * 10 + i64::from(d - b'0'))
    };
    let (year, month, day) = (n(1, 5), n(6, 8), n(9, 11));
    let (hour, minute, second, milli) = (n(12, 14), n(15, 17), n(18, 20), n(21, 24));
    if !(1..=12).contains(&month) || day < 1 || day > days_in_month(year, month) {
        return None;
    }
    if hour > 23 || minute > 59 || second > 60 || (second == 60 && milli != 0) {
        return None;
    }
    let days = days_from_civil(year, month, day);
    let seconds = ((days * 24 + hour) * 60 + minute) * 60 + second;
    Some(seconds * 1_000_000 + milli * 1000)
}

fn is_leap(year: i64) -> bool {
    year % 4 == 0 && (year % 100 != 0 || year % 400 == 0)
}

fn days_in_month(year: i64, month: i64) -> i64 {
    match month {
        2 if is_leap(year) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days from 1970-01-01 to a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    const LINE: &[u8] =
        b"[2024-06-03 17:04:05,123] DEBUG Completed request:{\"a\":1} (kafka.request.logger)";

    #[test]
    fn heads() {
        assert_eq!(head(LINE), Head::Json { json: 50 });
        assert_eq!(body(LINE, 50), Some(&b"{\"a\":1}"[..]));
        assert_eq!(
            head(b"[2024-06-03 17:04:05,123] INFO Completed request:Req"),
            Head::Text
        );
        assert_eq!(
            head(b"[2024-06-03 17:04:05,123] DEBUG Completed request:"),
            Head::Text
        );
        assert_eq!(head(b"[2024-06-03 17:04:05,123]"), Head::None);
        assert_eq!(
            head(b"[2024-06-03 17:04:05,123] debug Completed request:{"),
            Head::None
        );
        assert_eq!(
            head(b"[2024-0x-03 17:04:05,123] DEBUG Completed request:{"),
            Head::None
        );
        // a level so long that the '{' is past the 80th character
        let mut long = b"[2024-06-03 17:04:05,123] ".to_vec();
        long.extend(std::iter::repeat_n(b'A', 35));
        long.extend(b" Completed request:{}");
        assert_eq!(head(&long), Head::Text);
        assert_eq!(
            body(
                b"[2024-06-03 17:04:05,123] DEBUG Completed request:{\"a\"",
                50
            ),
            None
        );
    }

    #[test]
    fn timestamps() {
        assert_eq!(wall_clock_micros(LINE), Some(1_717_434_245_123_000));
        assert_eq!(wall_clock_micros(b"[1970-01-01 00:00:00,000]"), Some(0));
        assert_eq!(
            wall_clock_micros(b"[2024-02-29 00:00:00,000]"),
            Some(1_709_164_800_000_000)
        );
        assert_eq!(wall_clock_micros(b"[2023-02-29 00:00:00,000]"), None);
        assert_eq!(
            wall_clock_micros(b"[2000-02-29 00:00:00,000]"),
            Some(951_782_400_000_000)
        );
        assert_eq!(wall_clock_micros(b"[1900-02-29 00:00:00,000]"), None);
        assert_eq!(wall_clock_micros(b"[2024-13-45 99:00:00,000]"), None);
        assert_eq!(wall_clock_micros(b"[2024-04-31 00:00:00,000]"), None);
        assert_eq!(wall_clock_micros(b"[2024-06-03 24:00:00,000]"), None);
        assert_eq!(
            wall_clock_micros(b"[2024-06-03 23:59:60,000]"),
            Some(1_717_459_200_000_000)
        );
        assert_eq!(wall_clock_micros(b"[2024-06-03 23:59:60,001]"), None);
        assert_eq!(wall_clock_micros(b"[2024-00-03 00:00:00,000]"), None);
    }
}
