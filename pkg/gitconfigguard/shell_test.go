package gitconfigguard

import (
	"strings"
	"testing"
)

func TestPrograms(t *testing.T) {
	for cmd, want := range map[string]string{
		"./tools/ssh.sh -i key":           "./tools/ssh.sh",
		"code --wait":                     "code",
		`"./my tools/ed.sh" --flag`:       "./my tools/ed.sh",
		`'./a b/c' x`:                     "./a b/c",
		`./a\ b arg`:                      "./a b",
		"FOO=1 BAR=x ./run.sh a":          "./run.sh",
		"env -i PATH=/bin ./scripts/x.sh": "./scripts/x.sh",
		"exec ./x":                        "./x",
		"git fetch && ./post.sh; ./third | ./fourth &":  "git ./post.sh ./third ./fourth",
		"sh scripts/lint.sh --fix":                      "sh scripts/lint.sh",
		"bash -e -x ./ci/run":                           "bash ./ci/run",
		`sh -c "./inner.sh a; cd x && ./two"`:           "sh ./inner.sh cd ./two",
		"python3 -m pytest":                             "python3",
		"python3 -u tools/conv.py %f":                   "python3 tools/conv.py",
		"node -e 'x()'":                                 "node",
		"/usr/bin/env python3 tools/t.py":               "/usr/bin/env python3 tools/t.py",
		"f() { ./fn.sh; }; f":                           "f ./fn.sh f",
		"echo $(./sub.sh) `./tick.sh`":                  "echo ./sub.sh ./tick.sh",
		"./a.sh > ./out.txt 2>&1 < ./in.txt":            "./a.sh",
		"if ./cond.sh; then ./yes.sh; else ./no.sh; fi": "./cond.sh ./yes.sh ./no.sh",
		"./x.sh # ./comment.sh":                         "./x.sh",
		"":                                              "",
		"   ":                                           "",
		"! ./negated.sh":                                "./negated.sh",
		"nohup nice -n 5 ./bg.sh":                       "./bg.sh",
		"perl -- ./script.pl":                           "perl ./script.pl",
		"git -c core.pager=cat log":                     "git",
		"hexdump -C":                                    "hexdump",
		"\"./unterminated":                              "./unterminated",
		"./line\\\ncontinued":                           "./linecontinued",
		"echo a\n./second-line.sh":                      "echo ./second-line.sh",
		"cat %A %O %B > ./merged":                       "cat",
		"sh -c 'sh -c \"sh -c ./deep.sh\"'":             "sh sh sh ./deep.sh",
		"MERGE=1":                                       "",
		"sudo ./s.sh":                                   "sudo",
		"./has=equals.sh":                               "./has=equals.sh",
		"time -p ./timed.sh":                            "./timed.sh",
		"command -v ./c.sh":                             "./c.sh",
		"bash":                                          "bash",
		"deno run ./x.ts":                               "deno run",
		"builtin ./b.sh":                                "./b.sh",
		"./x.sh\t--tab":                                 "./x.sh",
		"(./sub.sh)":                                    "./sub.sh",
		"a || ./b":                                      "a ./b",
		"while ./w.sh; do ./d.sh; done":                 "./w.sh ./d.sh",
		"case x in y) ./c.sh;; esac":                    "x ./c.sh",
		"for i in 1; do ./loop.sh; done":                "i ./loop.sh",
		"\"\" ./empty-first.sh":                         "",
		"'' x":                                          "",
		"./one.sh&./two.sh":                             "./one.sh ./two.sh",
		"sh":                                            "sh",
		"sh -c":                                         "sh",
		"python3 --":                                    "python3",
		"ruby":                                          "ruby",
		"env":                                           "",
		"./a;;./b":                                      "./a ./b",
		"x=1;./b":                                       "./b",
		"echo \"$(./in-quotes.sh)\"":                    "echo ./in-quotes.sh",
		"echo \"`./tick-in-quotes.sh` $(a $(./nested.sh))\"": "echo ./tick-in-quotes.sh a ./nested.sh",
		"./q\"uo\"ted.sh":                                "./quoted.sh",
		"./dq-escape\\\".sh":                             "./dq-escape\".sh",
		"\"./dq \\\"inner\\\" end\"":                     "./dq \"inner\" end",
		"'./sq \\ raw'":                                  "./sq \\ raw",
		"./x >./redirected-without-space.txt ./not-prog": "./x",
	} {
		var got []string
		for _, w := range programs(cmd) {
			got = append(got, w)
		}
		if g := strings.Join(got, " "); g != want {
			t.Errorf("programs(%q) = %q, want %q", cmd, g, want)
		}
	}
}
