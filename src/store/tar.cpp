// tar_directory: a POSIX ustar archive of a checkpoint directory's regular files, written by hand
// (512-byte headers, octal fields, the header checksum, zero padding and two end-of-archive blocks).
#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sys/stat.h>

#include "store/checkpoint_files.h"

namespace tinkerd::store {
namespace {

namespace fs = std::filesystem;

constexpr size_t BLOCK = 512;
constexpr size_t NAME_FIELD = 100;
constexpr uint64_t MAX_SIZE = (uint64_t{1} << 33) - 1;  // 11 octal digits

// Writes `value` as zero-padded octal in `width - 1` digits plus a NUL terminator (the caller keeps
// values within range).
void put_octal(char * field, size_t width, uint64_t value) {
    field[width - 1] = '\0';
    for (size_t i = width - 1; i-- > 0;) {
        field[i] = static_cast<char>('0' + (value & 7));
        value >>= 3;
    }
}

// One ustar header block for a regular file.
std::string make_header(const std::string & name, uint64_t size, uint64_t mtime) {
    std::string header(BLOCK, '\0');
    char * h = header.data();
    std::memcpy(h, name.data(), name.size());  // name[100] at 0
    put_octal(h + 100, 8, 0644);               // mode
    put_octal(h + 108, 8, 0);                  // uid
    put_octal(h + 116, 8, 0);                  // gid
    put_octal(h + 124, 12, size);              // size
    put_octal(h + 136, 12, mtime);             // mtime
    h[156] = '0';                              // typeflag: regular file
    std::memcpy(h + 257, "ustar", 6);          // magic "ustar\0"
    std::memcpy(h + 263, "00", 2);             // version
    // The checksum is the byte sum of the header with the checksum field itself read as spaces.
    std::memset(h + 148, ' ', 8);
    unsigned sum = 0;
    for (char c : header) {
        sum += static_cast<unsigned char>(c);
    }
    put_octal(h + 148, 7, sum);  // six digits and a NUL, then the space already there
    return header;
}

Result<std::string> read_file(const fs::path & path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) {
        return internal_error("cannot read " + path.string());
    }
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (in.bad()) {
        return internal_error("cannot read " + path.string());
    }
    return bytes;
}

uint64_t modification_time(const fs::path & path) {
    struct stat info {};
    if (::stat(path.c_str(), &info) != 0 || info.st_mtime < 0) {
        return 0;
    }
    return static_cast<uint64_t>(info.st_mtime);
}

Result<std::vector<std::string>> sorted_file_names(const fs::path & dir) {
    std::error_code ec;
    std::vector<std::string> names;
    for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
        if (it->is_regular_file(ec)) {
            names.push_back(it->path().filename().string());
        }
    }
    if (ec) {
        return internal_error("cannot list " + dir.string() + ": " + ec.message());
    }
    std::sort(names.begin(), names.end());
    return names;
}

// Appends one file's header, bytes and padding.
Result<void> append_file(std::string & archive, const fs::path & path) {
    const std::string name = path.filename().string();
    if (name.size() >= NAME_FIELD) {
        return internal_error("tar: file name too long: " + name);
    }
    Result<std::string> bytes = read_file(path);
    TRY_STATUS(bytes);
    if (bytes->size() > MAX_SIZE) {
        return internal_error("tar: file too large for ustar: " + name);
    }
    archive += make_header(name, bytes->size(), modification_time(path));
    archive += bytes.value();
    archive.append((BLOCK - bytes->size() % BLOCK) % BLOCK, '\0');
    return {};
}

}  // namespace

Result<std::string> tar_directory(const std::string & dir) {
    if (!fs::is_directory(dir)) {
        return not_found("checkpoint not found: " + dir);
    }
    Result<std::vector<std::string>> names = sorted_file_names(dir);
    TRY_STATUS(names);
    std::string archive;
    for (const std::string & name : names.value()) {
        TRY_STATUS(append_file(archive, fs::path(dir) / name));
    }
    archive.append(2 * BLOCK, '\0');
    return archive;
}

}  // namespace tinkerd::store
