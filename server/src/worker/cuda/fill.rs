//! Host-side inputs for verification and timing: a seeded RNG, the SPEC.md distributions
//! (SPEC.md, "Distributions"), element encoding for every `DType` (f16 and bf16 by hand),
//! and the byte patterns used to poison `out` buffers and to fill guard regions.
//!
//! Pure: no CUDA. Inputs are made on the host so that the reference and the candidate get
//! byte-identical data and a failure replays exactly from (seed, case, trial).

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

/// xoshiro256**: fast, good quality, and fully specified here so that results do not
/// depend on a crate's version.
#[derive(Clone, Debug)]
pub struct Rng {
    s: [u64; 4],
}

impl Rng {
    pub fn new(seed: u64) -> Rng {
        let mut x = seed;
        let mut next = || {
            x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
            mix64(x)
        };
        Rng {
            s: [next(), next(), next(), next()],
        }
    }

    pub fn next_u64(&mut self) -> u64 {
        let result = self.s[1].wrapping_mul(5).rotate_left(7).wrapping_mul(9);
        let t = self.s[1] << 17;
        self.s[2] ^= self.s[0];
        self.s[3] ^= self.s[1];
        self.s[1] ^= self.s[2];
        self.s[0] ^= self.s[3];
        self.s[2] ^= t;
        self.s[3] = self.s[3].rotate_left(45);
        result
    }

    /// Uniform in [0, 1) with 53 random bits.
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// Uniform in [0, span) for span > 0 (Lemire's multiply-shift; the bias is at most
    /// span / 2^64, far below anything a test can see).
    fn below(&mut self, span: u128) -> u128 {
        (u128::from(self.next_u64()) * span) >> 64
    }
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

/// The guard pattern: a 4-byte word unlikely to be written by accident (not 0, not a
/// small integer, not a common float).
pub const GUARD_WORD: [u8; 4] = [0xc7, 0x3b, 0x5e, 0x91];

pub fn guard_fill(len: usize) -> Vec<u8> {
    (0..len).map(|i| GUARD_WORD[i % 4]).collect()
}

/// Index (in elements of `elem` bytes) of the first guard element that differs from the
/// pattern, or None when the guard is intact.
pub fn first_changed_guard(guard: &[u8], elem: usize) -> Option<usize> {
    guard
        .iter()
        .enumerate()
        .find(|(i, b)| **b != GUARD_WORD[i % 4])
        .map(|(i, _)| i / elem.max(1))
}

/// Where a guard was overwritten, in elements relative to the buffer's start: `elems + k`
/// for the k-th element past the end, negative for elements before the start (the one
/// nearest the buffer is reported, as the likeliest off-by-one).
pub fn guard_violation(front: &[u8], back: &[u8], elems: usize, elem: usize) -> Option<i64> {
    if let Some(k) = first_changed_guard(back, elem) {
        return Some((elems + k) as i64);
    }
    let last = front
        .iter()
        .enumerate()
        .rev()
        .find(|(i, b)| **b != GUARD_WORD[i % 4])
        .map(|(i, _)| i)?;
    let before = (front.len() - last).div_ceil(elem.max(1));
    Some(-(before as i64))
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

/// Elements per independently seeded block of a buffer.
const FILL_BLOCK: usize = 1 << 16;

/// The bytes of one buffer's initial contents (without guards). `out` buffers are
/// poisoned; `in`/`inout` are drawn from `dist`. The buffer is filled in blocks of
/// `FILL_BLOCK` elements, block `i` from its own stream seeded by (one draw of `rng`,
/// `i`), on all cores: the values depend on the seed only, never on the thread count,
/// and a 16M-element buffer fills in milliseconds instead of a second.
pub fn fill_buffer(dtype: DType, role: Role, dist: &Dist, elems: usize, rng: &mut Rng) -> Vec<u8> {
    let es = elem_size(dtype);
    let mut out = vec![0u8; elems * es];
    let base = rng.next_u64();
    let mut blocks: Vec<(usize, &mut [u8])> = out.chunks_mut(FILL_BLOCK * es).enumerate().collect();
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(16);
    if threads <= 1 || blocks.len() <= 1 {
        for (i, block) in blocks {
            fill_block(
                dtype,
                role,
                dist,
                i * FILL_BLOCK,
                block,
                &mut Rng::new(buffer_seed(base, i)),
            );
        }
    } else {
        let per = blocks.len().div_ceil(threads);
        std::thread::scope(|scope| {
            while !blocks.is_empty() {
                let take = per.min(blocks.len());
                let mine: Vec<(usize, &mut [u8])> = blocks.drain(..take).collect();
                scope.spawn(move || {
                    for (i, block) in mine {
                        fill_block(
                            dtype,
                            role,
                            dist,
                            i * FILL_BLOCK,
                            block,
                            &mut Rng::new(buffer_seed(base, i)),
                        );
                    }
                });
            }
        });
    }
    out
}

/// Fill one block whose first element has index `first` in the buffer.
fn fill_block(dtype: DType, role: Role, dist: &Dist, first: usize, out: &mut [u8], rng: &mut Rng) {
    let es = elem_size(dtype);
    if role == Role::Out {
        let p = poison_elem(dtype);
        for chunk in out.chunks_exact_mut(es) {
            chunk.copy_from_slice(&p);
        }
        return;
    }
    match *dist {
        Dist::Uniform { lo, hi } => {
            for chunk in out.chunks_exact_mut(es) {
                let v = lo + (hi - lo) * rng.next_f64();
                encode(dtype, v, chunk);
            }
        }
        Dist::Normal { mean, std } => {
            let mut spare: Option<f64> = None;
            for chunk in out.chunks_exact_mut(es) {
                let z = match spare.take() {
                    Some(z) => z,
                    None => {
                        // Box-Muller; 1 - u keeps the logarithm's argument in (0, 1].
                        let u1 = 1.0 - rng.next_f64();
                        let u2 = rng.next_f64();
                        let r = (-2.0 * u1.ln()).sqrt();
                        let th = std::f64::consts::TAU * u2;
                        spare = Some(r * th.sin());
                        r * th.cos()
                    }
                };
                encode(dtype, mean + std * z, chunk);
            }
        }
        Dist::RandInt { lo, hi } => {
            let span = (i128::from(hi) - i128::from(lo)).max(1) as u128;
            for chunk in out.chunks_exact_mut(es) {
                let v = i128::from(lo) + rng.below(span) as i128;
                encode_int(dtype, v, chunk);
            }
        }
        Dist::Zeros => {
            for chunk in out.chunks_exact_mut(es) {
                encode(dtype, 0.0, chunk);
            }
        }
        Dist::Ones => {
            for chunk in out.chunks_exact_mut(es) {
                encode(dtype, 1.0, chunk);
            }
        }
        Dist::Arange => {
            for (i, chunk) in out.chunks_exact_mut(es).enumerate() {
                encode_int(dtype, (first + i) as i128, chunk);
            }
        }
    }
}

/// The seed of buffer `index` within a trial: each buffer gets its own stream, so adding
/// a buffer does not change the others' values.
pub fn buffer_seed(trial_seed: u64, index: usize) -> u64 {
    mix64(trial_seed ^ mix64(index as u64 + 1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_continue_indices_and_depend_only_on_the_seed() {
        let n = 3 * FILL_BLOCK + 17;
        let a = fill_buffer(DType::I32, Role::In, &Dist::Arange, n, &mut Rng::new(1));
        let at = |i: usize| i32::from_le_bytes(a[i * 4..i * 4 + 4].try_into().unwrap());
        assert_eq!(
            (at(FILL_BLOCK - 1), at(FILL_BLOCK), at(n - 1)),
            (FILL_BLOCK as i32 - 1, FILL_BLOCK as i32, n as i32 - 1)
        );
        let d = Dist::Normal {
            mean: 0.0,
            std: 1.0,
        };
        let x = fill_buffer(DType::F32, Role::In, &d, n, &mut Rng::new(9));
        let y = fill_buffer(DType::F32, Role::In, &d, n, &mut Rng::new(9));
        assert_eq!(x, y);
        // Different blocks are different streams.
        assert_ne!(x[..64], x[FILL_BLOCK * 4..FILL_BLOCK * 4 + 64]);
    }

    fn vals(dtype: DType, bytes: &[u8]) -> Vec<f64> {
        bytes
            .chunks_exact(elem_size(dtype))
            .map(|c| decode(dtype, c).as_f64())
            .collect()
    }

    #[test]
    fn same_seed_same_values_and_different_trials_differ() {
        let d = Dist::Uniform { lo: -1.0, hi: 1.0 };
        let a = fill_buffer(
            DType::F32,
            Role::In,
            &d,
            1000,
            &mut Rng::new(trial_seed(42, 0, 0)),
        );
        let b = fill_buffer(
            DType::F32,
            Role::In,
            &d,
            1000,
            &mut Rng::new(trial_seed(42, 0, 0)),
        );
        let c = fill_buffer(
            DType::F32,
            Role::In,
            &d,
            1000,
            &mut Rng::new(trial_seed(42, 0, 1)),
        );
        let e = fill_buffer(
            DType::F32,
            Role::In,
            &d,
            1000,
            &mut Rng::new(trial_seed(42, 1, 0)),
        );
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
            let v = vals(dt, &fill_buffer(dt, Role::In, &d, 20_000, &mut Rng::new(1)));
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
            &fill_buffer(DType::F64, Role::InOut, &d, 50_000, &mut Rng::new(9)),
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
            let v = vals(dt, &fill_buffer(dt, Role::In, &d, 5000, &mut Rng::new(3)));
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
                &mut Rng::new(3),
            ),
        );
        assert!(v.contains(&255.0) && v.contains(&0.0));
        // i64 keeps values beyond 2^53 exactly.
        let big = Dist::RandInt {
            lo: i64::MAX - 2,
            hi: i64::MAX,
        };
        let b = fill_buffer(DType::I64, Role::In, &big, 100, &mut Rng::new(5));
        for c in b.chunks_exact(8) {
            let x = i64::from_le_bytes(c.try_into().unwrap());
            assert!(x == i64::MAX - 2 || x == i64::MAX - 1, "{x}");
        }
    }

    #[test]
    fn constant_and_arange_fills() {
        let mut r = Rng::new(0);
        assert_eq!(
            vals(
                DType::Bf16,
                &fill_buffer(DType::Bf16, Role::In, &Dist::Ones, 3, &mut r)
            ),
            [1.0; 3]
        );
        assert_eq!(
            vals(
                DType::I32,
                &fill_buffer(DType::I32, Role::In, &Dist::Zeros, 3, &mut r)
            ),
            [0.0; 3]
        );
        assert_eq!(
            vals(
                DType::F16,
                &fill_buffer(DType::F16, Role::In, &Dist::Arange, 4, &mut r)
            ),
            [0.0, 1.0, 2.0, 3.0]
        );
        assert_eq!(
            vals(
                DType::Bool,
                &fill_buffer(DType::Bool, Role::In, &Dist::Ones, 2, &mut r)
            ),
            [1.0; 2]
        );
    }

    #[test]
    fn out_buffers_are_poisoned() {
        let b = fill_buffer(DType::F32, Role::Out, &Dist::Ones, 4, &mut Rng::new(0));
        assert!(vals(DType::F32, &b).iter().all(|x| x.is_nan()));
        let h = fill_buffer(DType::F16, Role::Out, &Dist::Ones, 2, &mut Rng::new(0));
        assert!(vals(DType::F16, &h).iter().all(|x| x.is_nan()));
        let bf = fill_buffer(DType::Bf16, Role::Out, &Dist::Ones, 2, &mut Rng::new(0));
        assert!(vals(DType::Bf16, &bf).iter().all(|x| x.is_nan()));
        let d = fill_buffer(DType::F64, Role::Out, &Dist::Ones, 2, &mut Rng::new(0));
        assert!(vals(DType::F64, &d).iter().all(|x| x.is_nan()));
        assert_eq!(
            fill_buffer(DType::I32, Role::Out, &Dist::Ones, 1, &mut Rng::new(0)),
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
    fn guard_pattern_and_first_changed_element() {
        assert_eq!(guard_bytes(DType::U8), 1024);
        assert_eq!(guard_bytes(DType::F32), 1024);
        assert_eq!(guard_bytes(DType::F64), 2048);
        let mut g = guard_fill(1024);
        assert_eq!(first_changed_guard(&g, 4), None);
        g[13] ^= 1;
        g[900] = 0;
        assert_eq!(first_changed_guard(&g, 4), Some(3));
        assert_eq!(first_changed_guard(&g, 2), Some(6));
    }

    #[test]
    fn guard_violation_names_elements_past_the_end_and_before_the_start() {
        let g = guard_fill(1024);
        assert_eq!(guard_violation(&g, &g, 100, 4), None);
        let mut back = g.clone();
        back[8] = 0;
        assert_eq!(guard_violation(&g, &back, 100, 4), Some(102));
        let mut front = g.clone();
        front[1020] = 0; // the last element before the buffer
        assert_eq!(guard_violation(&front, &g, 100, 4), Some(-1));
        front[0] = 0; // farther away: the nearest one is still reported
        assert_eq!(guard_violation(&front, &g, 100, 4), Some(-1));
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
