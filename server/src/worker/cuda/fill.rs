//! The inputs of verification and timing, described on the host and made on the device:
//! the counter-based generator of the docs/spec.md distributions (docs/spec.md, "Distributions"),
//! element encoding for every `DType` (f16 and bf16 by hand), the poison of `out`
//! buffers and the guard bytes around every buffer.
//!
//! Pure: no CUDA. The device generates the same bytes with `helpers.cu`, whose `klsp_gen`
//! is the twin of [`element_bits`]: element `i` of a buffer depends only on (key, i), so
//! the reference and the candidate get byte-identical data, a failure replays exactly
//! from (seed, case, trial), and nothing crosses PCIe to make inputs.

use crate::spec::{DType, Dist, Role, ScalarTy, Value};

/// splitmix64's finalizer: a bijective 64-bit mix, used both to seed and to derive seeds.
fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The seed of one (case, trial), derived from the request's base seed. Distinct cases and
/// trials get unrelated streams; the same triple always gives the same seed.
pub fn trial_seed(base: u64, case: usize, trial: u32) -> u64 {
    let c = mix64((case as u64).wrapping_add(0x9e37_79b9_7f4a_7c15));
    let t = mix64(u64::from(trial).wrapping_add(0x6a09_e667_f3bc_c909) ^ c.rotate_left(17));
    mix64(base ^ c ^ t.rotate_left(29))
}

/// Element size in bytes.
pub fn elem_size(dtype: DType) -> usize {
    dtype.size_bytes() as usize
}

// ---- f16 / bf16 ---------------------------------------------------------------------

/// f32 -> IEEE binary16, round to nearest even, with subnormals, infinities and NaN.
pub fn f32_to_f16(x: f32) -> u16 {
    let bits = x.to_bits();
    let sign = ((bits >> 16) & 0x8000) as u16;
    let exp = ((bits >> 23) & 0xff) as i32;
    let man = bits & 0x7f_ffff;
    if exp == 0xff {
        // Keep NaN a (quiet) NaN; infinity stays infinity.
        return sign
            | 0x7c00
            | if man != 0 {
                0x200 | (man >> 13) as u16
            } else {
                0
            };
    }
    let e = exp - 127 + 15;
    if e >= 0x1f {
        return sign | 0x7c00;
    }
    if e <= 0 {
        // Subnormal or zero in f16: shift the mantissa (with its hidden bit) into place.
        if e < -10 {
            return sign;
        }
        let m = man | 0x80_0000;
        let shift = (14 - e) as u32;
        let half = m >> shift;
        let rem = m & ((1 << shift) - 1);
        let mid = 1 << (shift - 1);
        let round = rem > mid || (rem == mid && (half & 1) == 1);
        return sign | (half + u32::from(round)) as u16;
    }
    let half = ((e as u32) << 10) | (man >> 13);
    let rem = man & 0x1fff;
    let round = rem > 0x1000 || (rem == 0x1000 && (half & 1) == 1);
    // A carry out of the mantissa correctly bumps the exponent (and may reach infinity).
    sign | (half + u32::from(round)) as u16
}

pub fn f16_to_f32(h: u16) -> f32 {
    let sign = (u32::from(h) & 0x8000) << 16;
    let exp = (u32::from(h) >> 10) & 0x1f;
    let man = u32::from(h) & 0x3ff;
    let bits = match (exp, man) {
        (0, 0) => sign,
        (0, m) => {
            // Subnormal: exact as an f32 multiple of 2^-24.
            let v = m as f32 * f32::from_bits(0x3380_0000); // 2^-24
            return if sign != 0 { -v } else { v };
        }
        (0x1f, 0) => sign | 0x7f80_0000,
        (0x1f, m) => sign | 0x7fc0_0000 | (m << 13),
        (e, m) => sign | ((e + 127 - 15) << 23) | (m << 13),
    };
    f32::from_bits(bits)
}

/// f32 -> bfloat16, round to nearest even; NaN stays a quiet NaN.
pub fn f32_to_bf16(x: f32) -> u16 {
    let bits = x.to_bits();
    if x.is_nan() {
        return ((bits >> 16) | 0x40) as u16;
    }
    let round = 0x7fff + ((bits >> 16) & 1);
    (bits.wrapping_add(round) >> 16) as u16
}

pub fn bf16_to_f32(h: u16) -> f32 {
    f32::from_bits(u32::from(h) << 16)
}

// ---- encoding -----------------------------------------------------------------------

/// Writes `v` as one element of `dtype` into `out` (exactly `elem_size(dtype)` bytes).
/// Integers: `v` is rounded toward negative infinity and clamped to the type's range;
/// bool is 1 for any non-zero value.
pub fn encode(dtype: DType, v: f64, out: &mut [u8]) {
    fn int(v: f64, lo: f64, hi: f64) -> f64 {
        if v.is_nan() {
            0.0
        } else {
            v.floor().clamp(lo, hi)
        }
    }
    match dtype {
        DType::F16 => out.copy_from_slice(&f32_to_f16(v as f32).to_le_bytes()),
        DType::Bf16 => out.copy_from_slice(&f32_to_bf16(v as f32).to_le_bytes()),
        DType::F32 => out.copy_from_slice(&(v as f32).to_le_bytes()),
        DType::F64 => out.copy_from_slice(&v.to_le_bytes()),
        DType::I8 => out.copy_from_slice(&(int(v, -128.0, 127.0) as i8).to_le_bytes()),
        DType::I16 => out.copy_from_slice(&(int(v, -32768.0, 32767.0) as i16).to_le_bytes()),
        DType::I32 => {
            out.copy_from_slice(&(int(v, i32::MIN as f64, i32::MAX as f64) as i32).to_le_bytes())
        }
        // `as` saturates at the i64 range, which is what clamping means here.
        DType::I64 => {
            out.copy_from_slice(&(int(v, i64::MIN as f64, i64::MAX as f64) as i64).to_le_bytes())
        }
        DType::U8 => out.copy_from_slice(&(int(v, 0.0, 255.0) as u8).to_le_bytes()),
        DType::U32 => out.copy_from_slice(&(int(v, 0.0, u32::MAX as f64) as u32).to_le_bytes()),
        DType::Bool => out[0] = u8::from(v != 0.0 && !v.is_nan()),
    }
}

/// Writes the integer `v` exactly (no detour through f64, so i64 keeps every bit);
/// clamped to the type's range. Float types get the nearest value.
pub fn encode_int(dtype: DType, v: i128, out: &mut [u8]) {
    let c = |lo: i128, hi: i128| v.clamp(lo, hi);
    match dtype {
        DType::I8 => out.copy_from_slice(&(c(i8::MIN.into(), i8::MAX.into()) as i8).to_le_bytes()),
        DType::I16 => {
            out.copy_from_slice(&(c(i16::MIN.into(), i16::MAX.into()) as i16).to_le_bytes())
        }
        DType::I32 => {
            out.copy_from_slice(&(c(i32::MIN.into(), i32::MAX.into()) as i32).to_le_bytes())
        }
        DType::I64 => {
            out.copy_from_slice(&(c(i64::MIN.into(), i64::MAX.into()) as i64).to_le_bytes())
        }
        DType::U8 => out.copy_from_slice(&(c(0, u8::MAX.into()) as u8).to_le_bytes()),
        DType::U32 => out.copy_from_slice(&(c(0, u32::MAX.into()) as u32).to_le_bytes()),
        DType::Bool => out[0] = u8::from(v != 0),
        DType::F16 | DType::Bf16 | DType::F32 | DType::F64 => encode(dtype, v as f64, out),
    }
}

/// One element read back: integers exactly, floats as f64 (exact for every float type).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Elem {
    Int(i128),
    Float(f64),
}

impl Elem {
    pub fn as_f64(self) -> f64 {
        match self {
            Elem::Int(v) => v as f64,
            Elem::Float(v) => v,
        }
    }
}

/// Reads one element of `dtype` from `b` (exactly `elem_size(dtype)` bytes).
pub fn decode(dtype: DType, b: &[u8]) -> Elem {
    let a2 = || [b[0], b[1]];
    let a4 = || [b[0], b[1], b[2], b[3]];
    let a8 = || [b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]];
    match dtype {
        DType::F16 => Elem::Float(f16_to_f32(u16::from_le_bytes(a2())).into()),
        DType::Bf16 => Elem::Float(bf16_to_f32(u16::from_le_bytes(a2())).into()),
        DType::F32 => Elem::Float(f32::from_le_bytes(a4()).into()),
        DType::F64 => Elem::Float(f64::from_le_bytes(a8())),
        DType::I8 => Elem::Int((b[0] as i8).into()),
        DType::I16 => Elem::Int(i16::from_le_bytes(a2()).into()),
        DType::I32 => Elem::Int(i32::from_le_bytes(a4()).into()),
        DType::I64 => Elem::Int(i64::from_le_bytes(a8()).into()),
        DType::U8 | DType::Bool => Elem::Int(b[0].into()),
        DType::U32 => Elem::Int(u32::from_le_bytes(a4()).into()),
    }
}

// ---- poison and guards --------------------------------------------------------------

/// The bytes of one poisoned `out` element: a quiet NaN with a payload no arithmetic
/// produces (GPUs return the canonical NaN), so "never written" can be told apart from
/// "computed NaN"; integers get 0xA5 in every byte.
pub fn poison_elem(dtype: DType) -> Vec<u8> {
    match dtype {
        DType::F16 => 0x7eadu16.to_le_bytes().to_vec(),
        DType::Bf16 => 0x7fedu16.to_le_bytes().to_vec(),
        DType::F32 => 0x7fc0_deadu32.to_le_bytes().to_vec(),
        DType::F64 => 0x7ff8_dead_dead_deadu64.to_le_bytes().to_vec(),
        _ => vec![0xa5; elem_size(dtype)],
    }
}

/// Guard region after (and before) every buffer: at least 256 elements and 1 KiB, and a
/// multiple of 256 bytes so that the buffer itself keeps cuMemAlloc's alignment.
pub fn guard_bytes(dtype: DType) -> usize {
    let b = (256 * elem_size(dtype)).max(1024);
    b.div_ceil(256) * 256
}

/// Byte `j` of a guard filled from stream `key`: the CPU twin of `klsp_guard_byte`,
/// for tests.
#[cfg(test)]
pub fn guard_byte(key: u64, j: u64) -> u8 {
    (counter_bits(key, j >> 3, 7) >> ((j & 7) * 8)) as u8
}

/// The bytes of a guard of `len` bytes from stream `key` (what `klsp_guard_fill` writes).
#[cfg(test)]
pub fn guard_fill(key: u64, len: usize) -> Vec<u8> {
    (0..len as u64).map(|j| guard_byte(key, j)).collect()
}

/// Changed bytes in one guard: how many, and the byte range they span (offsets within
/// the guard, end exclusive). What `klsp_guard_check` reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GuardDamage {
    pub bytes: u64,
    pub first: u64,
    pub end: u64,
}

/// The CPU twin of `klsp_guard_check`, for tests.
#[cfg(test)]
pub fn guard_damage(guard: &[u8], key: u64) -> Option<GuardDamage> {
    let mut d: Option<GuardDamage> = None;
    for (j, b) in guard.iter().enumerate() {
        let j = j as u64;
        if *b != guard_byte(key, j) {
            let e = d.get_or_insert(GuardDamage {
                bytes: 0,
                first: j,
                end: j,
            });
            e.bytes += 1;
            e.end = j + 1;
        }
    }
    d
}

/// An out-of-bounds write, as the guards saw it: the damage before the buffer's start
/// (offsets counted backwards from the start: 0 is the byte just before it) and after
/// its end (0 is the byte just past it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OutOfBounds {
    pub before: Option<GuardDamage>,
    pub after: Option<GuardDamage>,
}

impl OutOfBounds {
    /// From the two guards' damage as measured (front offsets from the allocation's
    /// start, `guard` bytes long).
    pub fn from_guards(
        front: Option<GuardDamage>,
        back: Option<GuardDamage>,
        guard: u64,
    ) -> Option<Self> {
        if front.is_none() && back.is_none() {
            return None;
        }
        Some(OutOfBounds {
            before: front.map(|d| GuardDamage {
                bytes: d.bytes,
                first: guard - d.end,
                end: guard - d.first,
            }),
            after: back,
        })
    }

    /// The element index of the first bad element: past the end (`elems + k`), else the
    /// nearest one before the start (negative).
    pub fn first_element(&self, elems: u64, elem: u64) -> i64 {
        let elem = elem.max(1);
        match (self.after, self.before) {
            (Some(a), _) => (elems + a.first / elem) as i64,
            (None, Some(b)) => -((b.first / elem) as i64) - 1,
            (None, None) => elems as i64,
        }
    }

    /// "past the end of `y`: 16 bytes changed, at elements 4099 to 4102 (bytes 0 to 15
    /// past the end)", and the same for damage before the start.
    pub fn describe(&self, name: &str, elems: u64, elem: u64) -> String {
        let elem = elem.max(1);
        let span = |d: &GuardDamage, past: bool| {
            let (lo, hi) = (d.first / elem, (d.end - 1) / elem);
            let (lo, hi) = if past {
                ((elems + lo) as i64, (elems + hi) as i64)
            } else {
                (-(hi as i64) - 1, -(lo as i64) - 1)
            };
            let els = if lo == hi {
                format!("element {lo}")
            } else {
                format!("elements {lo} to {hi}")
            };
            let bytes = if d.first + 1 == d.end {
                format!("byte {}", d.first)
            } else {
                format!("bytes {} to {}", d.first, d.end - 1)
            };
            format!(
                "{} byte{} changed, at {els} ({bytes} {})",
                d.bytes,
                if d.bytes == 1 { "" } else { "s" },
                if past {
                    "past the end"
                } else {
                    "before the start"
                }
            )
        };
        let mut parts = Vec::new();
        if let Some(a) = &self.after {
            parts.push(format!("past the end of `{name}`: {}", span(a, true)));
        }
        if let Some(b) = &self.before {
            parts.push(format!("before the start of `{name}`: {}", span(b, false)));
        }
        parts.join("; ")
    }
}

/// The bytes of a by-value kernel argument of C type `ty` (what `cuLaunchKernel` copies).
pub fn scalar_bytes(ty: ScalarTy, v: Value) -> Vec<u8> {
    let i = match v {
        Value::Int(i) => i128::from(i),
        Value::Float(f) => f as i128,
    };
    let f = v.as_f64();
    match ty {
        ScalarTy::Bool => vec![u8::from(i != 0 || f != 0.0)],
        ScalarTy::I8 => (i as i8).to_le_bytes().to_vec(),
        ScalarTy::I16 => (i as i16).to_le_bytes().to_vec(),
        ScalarTy::I32 => (i as i32).to_le_bytes().to_vec(),
        ScalarTy::I64 => (i as i64).to_le_bytes().to_vec(),
        ScalarTy::U8 => (i as u8).to_le_bytes().to_vec(),
        ScalarTy::U16 => (i as u16).to_le_bytes().to_vec(),
        ScalarTy::U32 => (i as u32).to_le_bytes().to_vec(),
        ScalarTy::U64 => (i as u64).to_le_bytes().to_vec(),
        ScalarTy::F16 => f32_to_f16(f as f32).to_le_bytes().to_vec(),
        ScalarTy::Bf16 => f32_to_bf16(f as f32).to_le_bytes().to_vec(),
        ScalarTy::F32 => (f as f32).to_le_bytes().to_vec(),
        ScalarTy::F64 => f.to_le_bytes().to_vec(),
    }
}

// ---- filling ------------------------------------------------------------------------

/// How a buffer is filled, as the device's `klsp_fill` takes it: the distribution's code
/// (spec::Dist order, then poison) and its parameters.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Fill {
    pub code: u32,
    pub p1: f64,
    pub p2: f64,
    pub ilo: i64,
    pub ispan: u64,
}

impl Fill {
    const POISON: u32 = 6;

    /// `out` buffers are poisoned; `in`/`inout` are drawn from `dist`.
    pub fn of(role: Role, dist: &Dist) -> Fill {
        let f = |code, p1, p2| Fill {
            code,
            p1,
            p2,
            ilo: 0,
            ispan: 1,
        };
        if role == Role::Out {
            return f(Fill::POISON, 0.0, 0.0);
        }
        match *dist {
            Dist::Uniform { lo, hi } => f(0, lo, hi),
            Dist::Normal { mean, std } => f(1, mean, std),
            Dist::RandInt { lo, hi } => Fill {
                ilo: lo,
                ispan: (i128::from(hi) - i128::from(lo)).clamp(1, i128::from(u64::MAX)) as u64,
                ..f(2, 0.0, 0.0)
            },
            Dist::Zeros => f(3, 0.0, 0.0),
            Dist::Ones => f(4, 0.0, 0.0),
            Dist::Arange => f(5, 0.0, 0.0),
        }
    }
}

/// The element type's code in `helpers.cu` (the order of `DType::ALL`).
pub fn dtype_code(dtype: DType) -> i32 {
    DType::ALL
        .iter()
        .position(|d| *d == dtype)
        .expect("DType::ALL lists every type") as i32
}

/// Word `k` of the stream `key` at element `i` (`klsp_bits`).
pub fn counter_bits(key: u64, i: u64, k: u64) -> u64 {
    mix64(
        key ^ mix64(
            i.wrapping_mul(0x9e37_79b9_7f4a_7c15)
                .wrapping_add(k.wrapping_mul(0xd1b5_4a32_d192_ed03))
                .wrapping_add(1),
        ),
    )
}

/// 53 random bits as a double in [0, 1).
fn unit(bits: u64) -> f64 {
    (bits >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
}

/// The bits (little-endian, `elem_size` bytes used) of element `i` of a buffer filled by
/// `fill` from stream `key`: the CPU twin of `klsp_gen`. Uniform, randint, the constants
/// and arange are bit-exact with the device; normal goes through `ln` and `cos`, which
/// the device's libm may round differently in the last place.
pub fn element_bits(dtype: DType, fill: &Fill, key: u64, i: u64) -> u64 {
    let mut out = [0u8; 8];
    let es = elem_size(dtype);
    let o = &mut out[..es];
    match fill.code {
        0 => encode(
            dtype,
            fill.p1 + (fill.p2 - fill.p1) * unit(counter_bits(key, i, 0)),
            o,
        ),
        1 => {
            let u1 = ((counter_bits(key, i, 0) >> 11) + 1) as f64 * (1.0 / (1u64 << 53) as f64);
            let u2 = unit(counter_bits(key, i, 1));
            let z = (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos();
            encode(dtype, fill.p1 + fill.p2 * z, o)
        }
        2 => {
            let off = ((u128::from(counter_bits(key, i, 0)) * u128::from(fill.ispan)) >> 64) as u64;
            encode_int(
                dtype,
                i128::from((fill.ilo as u64).wrapping_add(off) as i64),
                o,
            )
        }
        3 => encode_int(dtype, 0, o),
        4 => encode_int(dtype, 1, o),
        5 => encode_int(dtype, i128::from(i as i64), o),
        _ => o.copy_from_slice(&poison_elem(dtype)),
    }
    u64::from_le_bytes(out)
}

/// The bytes `klsp_fill` writes into a buffer of `n` elements (the twin, for tests).
#[cfg(test)]
pub fn fill_host(dtype: DType, fill: &Fill, key: u64, n: usize) -> Vec<u8> {
    let es = elem_size(dtype);
    let mut out = Vec::with_capacity(n * es);
    for i in 0..n as u64 {
        out.extend_from_slice(&element_bits(dtype, fill, key, i).to_le_bytes()[..es]);
    }
    out
}

/// The seed of buffer `index` within a trial: each buffer gets its own stream, so adding
/// a buffer does not change the others' values.
pub fn buffer_seed(trial_seed: u64, index: usize) -> u64 {
    mix64(trial_seed ^ mix64(index as u64 + 1))
}

/// The streams of a buffer's front and back guards, from the buffer's own key: guards
/// differ per buffer, case and trial, so bytes copied from another buffer's guard (or
/// from any input) into this one's show as a change.
pub fn guard_keys(buffer_key: u64) -> (u64, u64) {
    (
        mix64(buffer_key ^ 0x6775_6172_645f_6672),
        mix64(buffer_key ^ 0x6775_6172_645f_6261),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The twin's fill of a whole buffer, as the device makes it.
    fn fill_buffer(dtype: DType, role: Role, dist: &Dist, n: usize, key: u64) -> Vec<u8> {
        fill_host(dtype, &Fill::of(role, dist), key, n)
    }

    #[test]
    fn elements_depend_only_on_the_key_and_the_index() {
        let n = 70_000;
        let a = fill_buffer(DType::I32, Role::In, &Dist::Arange, n, 1);
        let at = |i: usize| i32::from_le_bytes(a[i * 4..i * 4 + 4].try_into().unwrap());
        assert_eq!((at(0), at(65_536), at(n - 1)), (0, 65_536, n as i32 - 1));
        let d = Dist::Normal {
            mean: 0.0,
            std: 1.0,
        };
        let x = fill_buffer(DType::F32, Role::In, &d, n, 9);
        let y = fill_buffer(DType::F32, Role::In, &d, n, 9);
        assert_eq!(x, y);
        // Element i is the same whatever the buffer's length (the device fills in any
        // order and with any grid).
        let short = fill_buffer(DType::F32, Role::In, &d, 100, 9);
        assert_eq!(short[..], x[..400]);
        assert_ne!(x[..64], fill_buffer(DType::F32, Role::In, &d, 16, 10)[..]);
    }

    /// Pins the generator: the device's `klsp_gen` computes the same function, and a
    /// change here changes every recorded seed's inputs.
    #[test]
    fn the_generator_is_pinned() {
        assert_eq!(counter_bits(0, 0, 0), PINNED[0]);
        assert_eq!(counter_bits(42, 7, 1), PINNED[1]);
        let u = Fill::of(Role::In, &Dist::Uniform { lo: -1.0, hi: 1.0 });
        assert_eq!(element_bits(DType::F32, &u, 5, 3), PINNED[2]);
        let r = Fill::of(Role::In, &Dist::RandInt { lo: -5, hi: 1000 });
        assert_eq!(element_bits(DType::I64, &r, 5, 3), PINNED[3]);
        assert_eq!(guard_byte(77, 13), PINNED[4] as u8);
    }

    const PINNED: [u64; 5] = [
        8_841_707_400_507_832_957,
        13_015_299_223_696_974_318,
        1_026_799_503, // 0.0439 as f32 bits
        519,
        38,
    ];

    fn vals(dtype: DType, bytes: &[u8]) -> Vec<f64> {
        bytes
            .chunks_exact(elem_size(dtype))
            .map(|c| decode(dtype, c).as_f64())
            .collect()
    }

    #[test]
    fn same_seed_same_values_and_different_trials_differ() {
        let d = Dist::Uniform { lo: -1.0, hi: 1.0 };
        let a = fill_buffer(DType::F32, Role::In, &d, 1000, trial_seed(42, 0, 0));
        let b = fill_buffer(DType::F32, Role::In, &d, 1000, trial_seed(42, 0, 0));
        let c = fill_buffer(DType::F32, Role::In, &d, 1000, trial_seed(42, 0, 1));
        let e = fill_buffer(DType::F32, Role::In, &d, 1000, trial_seed(42, 1, 0));
        assert_eq!(a, b);
        assert_ne!(a, c);
        assert_ne!(a, e);
        assert_ne!(trial_seed(1, 2, 3), trial_seed(1, 3, 2));
        assert_ne!(buffer_seed(7, 0), buffer_seed(7, 1));
    }

    #[test]
    fn uniform_stays_in_range_and_covers_it() {
        let d = Dist::Uniform { lo: 2.0, hi: 5.0 };
        for dt in [DType::F32, DType::F64, DType::F16, DType::Bf16] {
            let v = vals(dt, &fill_buffer(dt, Role::In, &d, 20_000, 1));
            // f16/bf16 rounding may land exactly on hi; never beyond it.
            assert!(v.iter().all(|x| (2.0..=5.0).contains(x)), "{dt}");
            let mean = v.iter().sum::<f64>() / v.len() as f64;
            assert!((mean - 3.5).abs() < 0.05, "{dt}: mean {mean}");
            assert!(v.iter().any(|x| *x < 2.1) && v.iter().any(|x| *x > 4.9));
        }
    }

    #[test]
    fn normal_has_the_asked_mean_and_std() {
        let d = Dist::Normal {
            mean: 3.0,
            std: 2.0,
        };
        let v = vals(
            DType::F64,
            &fill_buffer(DType::F64, Role::InOut, &d, 50_000, 9),
        );
        let mean = v.iter().sum::<f64>() / v.len() as f64;
        let var = v.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / v.len() as f64;
        assert!((mean - 3.0).abs() < 0.05, "mean {mean}");
        assert!((var.sqrt() - 2.0).abs() < 0.05, "std {}", var.sqrt());
    }

    #[test]
    fn randint_is_half_open_and_hits_every_value() {
        let d = Dist::RandInt { lo: -3, hi: 4 };
        for dt in [DType::I8, DType::I16, DType::I32, DType::I64, DType::F32] {
            let v = vals(dt, &fill_buffer(dt, Role::In, &d, 5000, 3));
            assert!(v.iter().all(|x| (-3.0..4.0).contains(x)), "{dt}");
            for want in -3..4 {
                assert!(v.contains(&f64::from(want)), "{dt} never drew {want}");
            }
        }
        let v = vals(
            DType::U8,
            &fill_buffer(
                DType::U8,
                Role::In,
                &Dist::RandInt { lo: 0, hi: 256 },
                5000,
                3,
            ),
        );
        assert!(v.contains(&255.0) && v.contains(&0.0));
        // i64 keeps values beyond 2^53 exactly.
        let big = Dist::RandInt {
            lo: i64::MAX - 2,
            hi: i64::MAX,
        };
        let b = fill_buffer(DType::I64, Role::In, &big, 100, 5);
        for c in b.chunks_exact(8) {
            let x = i64::from_le_bytes(c.try_into().unwrap());
            assert!(x == i64::MAX - 2 || x == i64::MAX - 1, "{x}");
        }
    }

    #[test]
    fn constant_and_arange_fills() {
        let r = 0u64;
        assert_eq!(
            vals(
                DType::Bf16,
                &fill_buffer(DType::Bf16, Role::In, &Dist::Ones, 3, r)
            ),
            [1.0; 3]
        );
        assert_eq!(
            vals(
                DType::I32,
                &fill_buffer(DType::I32, Role::In, &Dist::Zeros, 3, r)
            ),
            [0.0; 3]
        );
        assert_eq!(
            vals(
                DType::F16,
                &fill_buffer(DType::F16, Role::In, &Dist::Arange, 4, r)
            ),
            [0.0, 1.0, 2.0, 3.0]
        );
        assert_eq!(
            vals(
                DType::Bool,
                &fill_buffer(DType::Bool, Role::In, &Dist::Ones, 2, r)
            ),
            [1.0; 2]
        );
    }

    #[test]
    fn out_buffers_are_poisoned() {
        let b = fill_buffer(DType::F32, Role::Out, &Dist::Ones, 4, 0);
        assert!(vals(DType::F32, &b).iter().all(|x| x.is_nan()));
        let h = fill_buffer(DType::F16, Role::Out, &Dist::Ones, 2, 0);
        assert!(vals(DType::F16, &h).iter().all(|x| x.is_nan()));
        let bf = fill_buffer(DType::Bf16, Role::Out, &Dist::Ones, 2, 0);
        assert!(vals(DType::Bf16, &bf).iter().all(|x| x.is_nan()));
        let d = fill_buffer(DType::F64, Role::Out, &Dist::Ones, 2, 0);
        assert!(vals(DType::F64, &d).iter().all(|x| x.is_nan()));
        assert_eq!(
            fill_buffer(DType::I32, Role::Out, &Dist::Ones, 1, 0),
            [0xa5; 4]
        );
    }

    #[test]
    fn f16_conversion_round_trips_and_rounds_to_nearest_even() {
        // Every finite f16 survives f16 -> f32 -> f16.
        for h in 0..=u16::MAX {
            let f = f16_to_f32(h);
            if f.is_nan() {
                assert!(f32_to_f16(f) & 0x7c00 == 0x7c00 && f32_to_f16(f) & 0x3ff != 0);
            } else {
                assert_eq!(f32_to_f16(f), h, "{h:#06x} -> {f}");
            }
        }
        assert_eq!(f32_to_f16(1.0), 0x3c00);
        assert_eq!(f32_to_f16(-2.0), 0xc000);
        assert_eq!(f32_to_f16(65504.0), 0x7bff);
        assert_eq!(f32_to_f16(70000.0), 0x7c00); // overflow -> inf
        assert_eq!(f32_to_f16(f32::NEG_INFINITY), 0xfc00);
        assert_eq!(f32_to_f16(5.960_464_5e-8), 0x0001); // smallest subnormal
        assert_eq!(f32_to_f16(1e-9), 0x0000);
        // 1 + 2^-11 is a tie between 1 and 1 + 2^-10: rounds to even (1.0).
        assert_eq!(f32_to_f16(1.0 + 2f32.powi(-11)), 0x3c00);
        assert_eq!(f32_to_f16(1.0 + 3.0 * 2f32.powi(-11)), 0x3c02);
        assert_eq!(f16_to_f32(0x3555), 0.333_251_95);
    }

    #[test]
    fn bf16_conversion_round_trips_and_rounds_to_nearest_even() {
        for h in 0..=u16::MAX {
            let f = bf16_to_f32(h);
            if f.is_nan() {
                assert!(bf16_to_f32(f32_to_bf16(f)).is_nan());
            } else {
                assert_eq!(f32_to_bf16(f), h);
            }
        }
        assert_eq!(f32_to_bf16(1.0), 0x3f80);
        // 1 + 2^-8 is a tie: to even (1.0); 1 + 3*2^-8 rounds up.
        assert_eq!(f32_to_bf16(1.0 + 2f32.powi(-8)), 0x3f80);
        assert_eq!(f32_to_bf16(1.0 + 3.0 * 2f32.powi(-8)), 0x3f82);
        assert_eq!(f32_to_bf16(f32::MAX), 0x7f80); // rounds up to inf
    }

    #[test]
    fn integer_encoding_clamps_and_bool_is_zero_or_one() {
        let mut b = [0u8; 1];
        encode(DType::I8, 300.0, &mut b);
        assert_eq!(b[0] as i8, 127);
        encode(DType::U8, -5.0, &mut b);
        assert_eq!(b[0], 0);
        encode(DType::Bool, 7.0, &mut b);
        assert_eq!(b[0], 1);
        let mut w = [0u8; 4];
        encode(DType::I32, -2.5, &mut w);
        assert_eq!(i32::from_le_bytes(w), -3);
    }

    #[test]
    fn guards_differ_per_buffer_and_trial_and_name_the_damage() {
        assert_eq!(guard_bytes(DType::U8), 1024);
        assert_eq!(guard_bytes(DType::F32), 1024);
        assert_eq!(guard_bytes(DType::F64), 2048);
        let k0 = buffer_seed(trial_seed(1, 0, 0), 0);
        let k1 = buffer_seed(trial_seed(1, 0, 0), 1);
        let k2 = buffer_seed(trial_seed(1, 0, 1), 0);
        let (f0, b0) = guard_keys(k0);
        let g = |k| guard_fill(k, 1024);
        // Every buffer, trial and side has its own bytes: copying one guard into another
        // is a change.
        for (x, y) in [(f0, b0), (b0, guard_keys(k1).1), (b0, guard_keys(k2).1)] {
            let same = g(x).iter().zip(g(y)).filter(|(a, b)| **a == *b).count();
            assert!(same < 20, "{same} equal bytes");
        }
        // Not a repeating word, and no long runs of zeros or of one byte.
        let bytes = g(b0);
        assert!(bytes.windows(4).filter(|w| w == &&bytes[..4]).count() < 3);
        assert_eq!(guard_damage(&bytes, b0), None);

        let mut back = bytes.clone();
        back[8..24].copy_from_slice(&[0; 16]);
        let d = guard_damage(&back, b0).unwrap();
        assert_eq!((d.first, d.end), (8, 24));
        assert!(d.bytes >= 14, "{d:?}"); // a random byte may already be 0
        let oob = OutOfBounds::from_guards(None, Some(d), 1024).unwrap();
        assert_eq!(oob.first_element(100, 4), 102);
        assert_eq!(
            oob.describe("y", 100, 4),
            format!(
                "past the end of `y`: {} bytes changed, at elements 102 to 105 (bytes 8 to 23 past the end)",
                d.bytes
            )
        );

        let mut front = bytes.clone();
        front[1020] ^= 0xff; // the last element before the buffer
        let d = guard_damage(&front, b0).unwrap();
        let oob = OutOfBounds::from_guards(Some(d), None, 1024).unwrap();
        assert_eq!(oob.first_element(100, 4), -1);
        assert_eq!(
            oob.describe("x", 100, 4),
            "before the start of `x`: 1 byte changed, at element -1 (byte 3 before the start)"
        );
    }

    #[test]
    fn scalar_arguments_have_their_c_size_and_value() {
        assert_eq!(
            scalar_bytes(ScalarTy::I32, Value::Int(-2)),
            (-2i32).to_le_bytes()
        );
        assert_eq!(
            scalar_bytes(ScalarTy::F32, Value::Float(2.5)),
            2.5f32.to_le_bytes()
        );
        assert_eq!(
            scalar_bytes(ScalarTy::F32, Value::Int(3)),
            3f32.to_le_bytes()
        );
        assert_eq!(
            scalar_bytes(ScalarTy::F64, Value::Float(0.1)),
            0.1f64.to_le_bytes()
        );
        assert_eq!(
            scalar_bytes(ScalarTy::U64, Value::Int(1 << 40)),
            (1u64 << 40).to_le_bytes()
        );
        assert_eq!(
            scalar_bytes(ScalarTy::F16, Value::Float(1.0)),
            0x3c00u16.to_le_bytes()
        );
        assert_eq!(
            scalar_bytes(ScalarTy::Bf16, Value::Float(1.0)),
            0x3f80u16.to_le_bytes()
        );
        assert_eq!(scalar_bytes(ScalarTy::Bool, Value::Int(5)), [1]);
        assert_eq!(scalar_bytes(ScalarTy::I8, Value::Int(-1)).len(), 1);
    }
}
