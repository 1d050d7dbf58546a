//! Conversions from engine types (byte ranges, findings) to LSP types.

use tower_lsp::lsp_types::{Diagnostic, DiagnosticSeverity, NumberOrString, Position, Range};

use crate::analysis::{Finding, Severity};
use crate::document::{Document, PositionEncoding};
use crate::syntax::ByteRange;

pub fn lsp_range(doc: &Document, r: &ByteRange, enc: PositionEncoding) -> Range {
    let (s, e) = doc.range(r, enc);
    Range {
        start: Position {
            line: s.line,
            character: s.col,
        },
        end: Position {
            line: e.line,
            character: e.col,
        },
    }
}

pub fn lsp_diagnostic(doc: &Document, f: &Finding, enc: PositionEncoding) -> Diagnostic {
    Diagnostic {
        range: lsp_range(doc, &f.range, enc),
        severity: Some(match f.severity {
            Severity::Error => DiagnosticSeverity::ERROR,
            Severity::Warning => DiagnosticSeverity::WARNING,
            Severity::Information => DiagnosticSeverity::INFORMATION,
            Severity::Hint => DiagnosticSeverity::HINT,
        }),
        code: None::<NumberOrString>,
        source: Some(f.source.label().to_string()),
        message: f.message.clone(),
        ..Default::default()
    }
}
