//! The parts of an Itanium-mangled kernel name that capture needs (issue #32): the
//! kernel's unqualified name and its template arguments. `cudaFuncGetName` gives the
//! symbol as the compiler emitted it: `saxpy` for an `extern "C"` kernel,
//! `_Z5scalePKfPfi` for a C++ one, `_ZN2ns6reduceILi256EEEvPKfPfi` for
//! `ns::reduce<256>`. Pure; anything it does not understand is an error naming it.

/// One template argument of a launch.
#[derive(Clone, Debug, PartialEq)]
pub enum TemplateArg {
    /// An integer or bool literal (`Li256E`, `Lb1E`).
    Int(i64),
    /// A type (`f` float, `N3c104HalfE` c10::Half), as C++ spells it.
    Type(String),
}

/// A kernel's name and template arguments.
#[derive(Clone, Debug, PartialEq)]
pub struct Mangled {
    pub name: String,
    pub template_args: Vec<TemplateArg>,
}

/// Parses `symbol`; a name that is not mangled (`extern "C"`) is returned as it is.
pub fn parse(symbol: &str) -> Result<Mangled, String> {
    let Some(rest) = symbol.strip_prefix("_Z") else {
        return Ok(Mangled {
            name: symbol.to_string(),
            template_args: Vec::new(),
        });
    };
    let mut p = Cursor {
        s: rest.as_bytes(),
        i: 0,
    };
    p.skip(b'L');
    let nested = p.eat(b'N');
    let last;
    loop {
        while matches!(p.peek(), Some(b'K' | b'V' | b'r' | b'L')) {
            p.i += 1;
        }
        let name = p.ident().ok_or_else(|| unsupported(symbol))?;
        let args = if p.peek() == Some(b'I') {
            p.template_args().ok_or_else(|| unsupported(symbol))?
        } else {
            Vec::new()
        };
        if !nested || p.eat(b'E') {
            last = (name, args);
            break;
        }
    }
    let (name, template_args) = last;
    Ok(Mangled {
        name,
        template_args,
    })
}

fn unsupported(symbol: &str) -> String {
    format!("the kernel's symbol `{symbol}` could not be read (an operator, a lambda or a name form capture does not know)")
}

struct Cursor<'a> {
    s: &'a [u8],
    i: usize,
}

impl Cursor<'_> {
    fn peek(&self) -> Option<u8> {
        self.s.get(self.i).copied()
    }

    fn eat(&mut self, c: u8) -> bool {
        let yes = self.peek() == Some(c);
        if yes {
            self.i += 1;
        }
        yes
    }

    fn skip(&mut self, c: u8) {
        while self.eat(c) {}
    }

    fn number(&mut self) -> Option<u64> {
        let start = self.i;
        while self.peek().is_some_and(|c| c.is_ascii_digit()) {
            self.i += 1;
        }
        std::str::from_utf8(&self.s[start..self.i])
            .ok()?
            .parse()
            .ok()
    }

    /// `<length><identifier>`.
    fn ident(&mut self) -> Option<String> {
        let n = usize::try_from(self.number()?).ok()?;
        let end = self.i.checked_add(n)?;
        let text = std::str::from_utf8(self.s.get(self.i..end)?).ok()?;
        self.i = end;
        Some(text.to_string())
    }

    /// `I <arg>+ E`.
    fn template_args(&mut self) -> Option<Vec<TemplateArg>> {
        self.eat(b'I').then_some(())?;
        let mut out = Vec::new();
        while !self.eat(b'E') {
            out.push(self.template_arg()?);
        }
        Some(out)
    }

    fn template_arg(&mut self) -> Option<TemplateArg> {
        match self.peek()? {
            b'L' => {
                self.i += 1;
                builtin(self.peek()?)?;
                self.i += 1;
                let neg = self.eat(b'n');
                let v = i64::try_from(self.number()?).ok()?;
                self.eat(b'E').then_some(())?;
                Some(TemplateArg::Int(if neg { -v } else { v }))
            }
            b'N' => {
                self.i += 1;
                let mut parts = Vec::new();
                while !self.eat(b'E') {
                    parts.push(self.ident()?);
                }
                Some(TemplateArg::Type(parts.join("::")))
            }
            c if c.is_ascii_digit() => Some(TemplateArg::Type(self.ident()?)),
            c => {
                self.i += 1;
                Some(TemplateArg::Type(builtin(c)?.to_string()))
            }
        }
    }
}

/// The C++ spelling of a one-letter builtin type code.
fn builtin(c: u8) -> Option<&'static str> {
    Some(match c {
        b'v' => "void",
        b'b' => "bool",
        b'c' => "char",
        b'a' => "signed char",
        b'h' => "unsigned char",
        b's' => "short",
        b't' => "unsigned short",
        b'i' => "int",
        b'j' => "unsigned int",
        b'l' => "long",
        b'm' => "unsigned long",
        b'x' => "long long",
        b'y' => "unsigned long long",
        b'f' => "float",
        b'd' => "double",
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(s: &str) -> Mangled {
        parse(s).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn plain_nested_and_static_names() {
        assert_eq!(ok("saxpy").name, "saxpy");
        assert_eq!(ok("_Z5scalePKfPfi").name, "scale");
        assert_eq!(ok("_ZL10row_kernelPKfPfii").name, "row_kernel");
        assert_eq!(ok("_ZN2ns5inner7reduce2EPKfPfi").name, "reduce2");
        assert_eq!(ok("_ZN12_GLOBAL__N_16kernelEPf").name, "kernel");
        assert!(ok("_Z5scalePKfPfi").template_args.is_empty());
    }

    #[test]
    fn template_arguments_as_numbers_and_types() {
        let m = ok("_ZN2ns6reduceILi256ELb1EEEvPKfPfi");
        assert_eq!(m.name, "reduce");
        assert_eq!(
            m.template_args,
            vec![TemplateArg::Int(256), TemplateArg::Int(1)]
        );
        let m = ok("_Z10add_kernelIfLin3EEvPKT_PS0_i");
        assert_eq!(
            m.template_args,
            vec![TemplateArg::Type("float".into()), TemplateArg::Int(-3)]
        );
        let m = ok("_Z6kernelIN3c104HalfEEvPT_i");
        assert_eq!(m.template_args, vec![TemplateArg::Type("c10::Half".into())]);
    }

    #[test]
    fn names_it_cannot_read_are_errors() {
        assert!(parse("_Z").is_err());
        assert!(parse("_Z99short").is_err());
        assert!(parse("_Z1kIDv4_fEvPf").is_err());
    }
}
