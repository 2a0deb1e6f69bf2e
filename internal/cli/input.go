package cli

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// inputFlags are kubectl's -f and -R: files, directories and - for
// standard input, each -f once or several times.
type inputFlags struct {
	files     []string
	recursive bool
}

func (in *inputFlags) bind(f *pflag.FlagSet) {
	f.StringSliceVarP(&in.files, "filename", "f", nil,
		"manifest file, directory of them (.yaml, .yml, .json) or - for standard input; repeatable (required)")
	f.BoolVarP(&in.recursive, "recursive", "R", false, "read the directories of -f recursively")
}

// manifest is one file of input.
type manifest struct {
	name string // the file, or "-"
	data []byte
}

// read reads every -f in order; a directory's files sorted by name.
func (in *inputFlags) read(cmd *cobra.Command) ([]manifest, error) {
	if len(in.files) == 0 {
		return nil, usagef("-f: name a manifest file, a directory of them, or - for standard input")
	}
	var out []manifest
	stdin := false
	for _, name := range in.files {
		if name == "-" {
			if stdin {
				return nil, usagef("-f: - (standard input) given twice")
			}
			stdin = true
			data, err := io.ReadAll(cmd.InOrStdin())
			if err != nil {
				return nil, fmt.Errorf("-f -: %w", err)
			}
			out = append(out, manifest{name: "-", data: data})
			continue
		}
		files, err := in.expand(name)
		if err != nil {
			return nil, fmt.Errorf("-f: %w", err)
		}
		for _, file := range files {
			data, err := os.ReadFile(file)
			if err != nil {
				return nil, fmt.Errorf("-f: %w", err)
			}
			out = append(out, manifest{name: file, data: data})
		}
	}
	return out, nil
}

// expand is name's files: itself, or a directory's manifests (its
// subdirectories' too with -R), as kubectl reads them.
func (in *inputFlags) expand(name string) ([]string, error) {
	info, err := os.Stat(name)
	if err != nil {
		return nil, err
	}
	if !info.IsDir() {
		return []string{name}, nil
	}
	var files []string
	err = filepath.WalkDir(name, func(path string, d os.DirEntry, err error) error {
		switch {
		case err != nil:
			return err
		case d.IsDir() && path != name && !in.recursive:
			return filepath.SkipDir
		case !d.IsDir() && slices.Contains([]string{".yaml", ".yml", ".json"}, strings.ToLower(filepath.Ext(path))):
			files = append(files, path)
		}
		return nil
	})
	if err == nil && len(files) == 0 {
		hint := ""
		if !in.recursive {
			hint = "; -R reads its subdirectories too"
		}
		err = fmt.Errorf("%s: no manifests (.yaml, .yml or .json files)%s", name, hint)
	}
	return files, err
}
