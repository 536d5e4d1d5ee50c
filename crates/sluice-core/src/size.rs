//! Byte sizes as Redis's config writes them, for the node's and the sidecar's flags and
//! `CONFIG SET`: `123`, `10kb`, `64mb`, `1gb`.

/// Parses a byte size like Redis's config: `123`, `10kb`, `64mb`, `1gb` (also `k`, `m`, `g`,
/// powers of 1024 for the `b` forms and of 1000 for the bare letters, as Redis does).
pub fn parse_bytes(s: &str) -> Result<u64, String> {
    let lower = s.trim().to_ascii_lowercase();
    let digits = lower.chars().take_while(|c| c.is_ascii_digit()).count();
    let (number, unit) = lower.split_at(digits);
    let n: u64 = number
        .parse()
        .map_err(|_| format!("'{s}' is not a size (examples: 1048576, 100mb, 2gb)"))?;
    let mult: u64 = match unit {
        "" | "b" => 1,
        "k" => 1000,
        "kb" => 1024,
        "m" => 1000 * 1000,
        "mb" => 1024 * 1024,
        "g" => 1000 * 1000 * 1000,
        "gb" => 1024 * 1024 * 1024,
        _ => return Err(format!("'{s}' has an unknown unit (use b, kb, mb or gb)")),
    };
    n.checked_mul(mult)
        .ok_or_else(|| format!("'{s}' is too large"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_like_redis() {
        assert_eq!(parse_bytes("0"), Ok(0));
        assert_eq!(parse_bytes("1024"), Ok(1024));
        assert_eq!(parse_bytes("10kb"), Ok(10 * 1024));
        assert_eq!(parse_bytes("64MB"), Ok(64 << 20));
        assert_eq!(parse_bytes("1gb"), Ok(1 << 30));
        assert_eq!(parse_bytes("5m"), Ok(5_000_000));
        assert!(parse_bytes("12xb").is_err());
        assert!(parse_bytes("").is_err());
        assert!(parse_bytes("99999999999999gb").is_err());
    }
}
