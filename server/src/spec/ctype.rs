//! C types of CUDA parameters against spec element types (docs/spec.md, "Element types
//! against C pointer types"). The syntax layer already stripped `const`, `__restrict__`
//! and `volatile` and normalised spaces.

use super::plan::{DType, ScalarTy};

/// The element type and vector width a pointer's pointee stands for (`float4` -> f32 × 4).
pub(crate) fn pointee_dtype(pointee: &str) -> Option<(DType, u64)> {
    Some(match pointee {
        "float" => (DType::F32, 1),
        "float2" => (DType::F32, 2),
        "float4" => (DType::F32, 4),
        "__half" | "half" => (DType::F16, 1),
        "__half2" | "half2" => (DType::F16, 2),
        "__nv_bfloat16" | "nv_bfloat16" => (DType::Bf16, 1),
        "__nv_bfloat162" | "nv_bfloat162" => (DType::Bf16, 2),
        "double" => (DType::F64, 1),
        "double2" => (DType::F64, 2),
        "int" | "signed" | "signed int" | "int32_t" => (DType::I32, 1),
        "int2" => (DType::I32, 2),
        "int4" => (DType::I32, 4),
        "unsigned" | "unsigned int" | "uint32_t" => (DType::U32, 1),
        "uint2" => (DType::U32, 2),
        "uint4" => (DType::U32, 4),
        "long long" | "long long int" | "signed long long" | "int64_t" | "long" | "long int" => {
            (DType::I64, 1)
        }
        "unsigned char" | "uint8_t" => (DType::U8, 1),
        "uchar4" => (DType::U8, 4),
        "signed char" | "char" | "int8_t" => (DType::I8, 1),
        "char4" => (DType::I8, 4),
        "short" | "short int" | "signed short" | "int16_t" => (DType::I16, 1),
        "bool" => (DType::Bool, 1),
        _ => return None,
    })
}

/// The by-value type of a CUDA scalar parameter.
pub(crate) fn scalar_ty(ty: &str) -> Option<ScalarTy> {
    Some(match ty {
        "bool" => ScalarTy::Bool,
        "char" | "signed char" | "int8_t" => ScalarTy::I8,
        "short" | "short int" | "signed short" | "int16_t" => ScalarTy::I16,
        "int" | "signed" | "signed int" | "int32_t" => ScalarTy::I32,
        "long" | "long int" | "long long" | "long long int" | "signed long long" | "int64_t"
        | "ptrdiff_t" | "ssize_t" => ScalarTy::I64,
        "unsigned char" | "uint8_t" => ScalarTy::U8,
        "unsigned short" | "uint16_t" => ScalarTy::U16,
        "unsigned" | "unsigned int" | "uint32_t" => ScalarTy::U32,
        "unsigned long"
        | "unsigned long long"
        | "unsigned long long int"
        | "uint64_t"
        | "size_t" => ScalarTy::U64,
        "__half" | "half" => ScalarTy::F16,
        "__nv_bfloat16" | "nv_bfloat16" => ScalarTy::Bf16,
        "float" => ScalarTy::F32,
        "double" => ScalarTy::F64,
        _ => return None,
    })
}
