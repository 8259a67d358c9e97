//! Java's numeric conversions, which Kafka's results depend on bit for bit.

/// `Math.round(double)`: nearest long, ties toward positive infinity, NaN to 0,
/// saturating at `Long.MIN_VALUE` / `Long.MAX_VALUE`.
pub fn round(x: f64) -> i64 {
    if x.is_nan() {
        return 0;
    }
    let floor = x.floor();
    // Exact: for |x| < 2^52 the difference is representable; above, x is an integer.
    let rounded = if x - floor >= 0.5 { floor + 1.0 } else { floor };
    // `as` saturates and maps the infinities to the bounds, as Java does.
    rounded as i64
}

/// `(int) someLong`: the low 32 bits, two's-complement wrap.
pub fn long_to_int(x: i64) -> i32 {
    x as i32
}

/// `(int) someDouble`: truncation toward zero, saturating, NaN to 0.
pub fn double_to_int(x: f64) -> i32 {
    x as i32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_ties_go_up() {
        assert_eq!(round(0.5), 1);
        assert_eq!(round(-0.5), 0);
        assert_eq!(round(-1.5), -1);
        assert_eq!(round(2.5), 3);
        assert_eq!(round(0.49999999999999994), 0);
        assert_eq!(round(-2.4), -2);
        assert_eq!(round(-2.6), -3);
    }

    #[test]
    fn round_saturates_and_maps_nan() {
        assert_eq!(round(f64::NAN), 0);
        assert_eq!(round(f64::INFINITY), i64::MAX);
        assert_eq!(round(f64::NEG_INFINITY), i64::MIN);
        assert_eq!(round(1e300), i64::MAX);
        assert_eq!(round(4503599627370497.0), 4503599627370497);
    }

    #[test]
    fn int_conversions() {
        assert_eq!(long_to_int(3_000_000_000), -1_294_967_296);
        assert_eq!(long_to_int(i64::MAX), -1);
        assert_eq!(double_to_int(3e12), i32::MAX);
        assert_eq!(double_to_int(-3e12), i32::MIN);
        assert_eq!(double_to_int(f64::NAN), 0);
        assert_eq!(double_to_int(999.9000000000001), 999);
        assert_eq!(double_to_int(f64::MAX), i32::MAX);
    }
}
