//! The plain numbers a kernel reads, writes and takes by value.

mod sealed {
    pub trait Sealed {}
}

/// A plain number a kernel reads or writes: every bit pattern is a value
/// and it has no padding, so bytes copied from the device are always valid.
/// Implemented for the integer and floating-point types, and sealed.
pub trait DeviceScalar: sealed::Sealed + Copy + Default + Send + Sync + 'static {
    /// Zero.
    fn zero() -> Self;

    /// The value's bytes in the host's order, which is the device's, from
    /// the start of an 8-byte slot.
    fn to_bytes(self) -> [u8; 8];
}

macro_rules! device_scalars {
    ($($scalar:ty),*) => {$(
        impl sealed::Sealed for $scalar {}
        impl DeviceScalar for $scalar {
            fn zero() -> Self {
                0 as $scalar
            }

            fn to_bytes(self) -> [u8; 8] {
                let mut bytes = [0u8; 8];
                let native = self.to_ne_bytes();
                bytes[..native.len()].copy_from_slice(&native);
                bytes
            }
        }
    )*};
}

device_scalars!(u8, i8, u16, i16, u32, i32, u64, i64, f32, f64);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scalar_fills_its_slot_from_the_start_and_zeroes_the_rest() {
        assert_eq!(
            0x0102u16.to_bytes(),
            [
                0x0102u16.to_ne_bytes()[0],
                0x0102u16.to_ne_bytes()[1],
                0,
                0,
                0,
                0,
                0,
                0
            ]
        );
        assert_eq!(1.5f64.to_bytes(), 1.5f64.to_ne_bytes());
        assert_eq!(f32::zero(), 0.0);
        assert_eq!(i64::zero(), 0);
    }
}
